"""The compose file, the image and the systemd units: every command they run exists.

Docker and systemd cannot run here, so the files are read: each service's command and
health check, the image's CMD and HEALTHCHECK, and each unit's ExecStart must be
commands the CLI accepts as written.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from collections.abc import Callable
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from birddog.cli import main
from birddog.settings import Settings
from tests.support import eventually, free_port
from tests.support.cli import ROOT, Daemon, cli

COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _dockerfile_commands() -> dict[str, list[str]]:
    text = DOCKERFILE.replace("\\\n", " ")
    found = {}
    for instruction in ("CMD", "HEALTHCHECK"):
        [line] = [row for row in text.splitlines() if row.startswith(f"{instruction} ")]
        found[instruction] = json.loads(line[line.index("[") :])
    return found


def _birddog_commands() -> list[tuple[str, list[str]]]:
    commands = [(f"Dockerfile {name}", argv) for name, argv in _dockerfile_commands().items()]
    for name, service in COMPOSE["services"].items():
        if isinstance(service.get("command"), list):
            commands.append((f"{name} command", service["command"]))
        test = service.get("healthcheck", {}).get("test")
        if isinstance(test, list) and test[0] == "CMD":
            commands.append((f"{name} healthcheck", test[1:]))
    for unit in sorted((ROOT / "deploy" / "systemd").glob("*.service")):
        [start] = [row for row in unit.read_text().splitlines() if row.startswith("ExecStart=")]
        argv = shlex.split(start.removeprefix("ExecStart="))
        commands.append((f"{unit.name} ExecStart", ["birddog", *argv[1:]]))
        assert argv[0].endswith("/bin/birddog"), unit.name
    return [(where, argv) for where, argv in commands if argv[0] == "birddog"]


@pytest.mark.parametrize(("where", "argv"), _birddog_commands(), ids=str)
def test_every_command_the_image_and_compose_run_exists_in_the_cli(
    where: str, argv: list[str]
) -> None:
    """Each birddog command line parses as written: the command path and every option exist."""
    command: click.Command = main
    path: list[str] = []
    for word in argv[1:]:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
        path.append(word)
    assert not isinstance(command, click.Group), (where, "names a group, not a command")
    shown = CliRunner().invoke(
        main, [*argv[1:], "--help"], prog_name="birddog", catch_exceptions=False
    )
    assert shown.exit_code == 0, (where, shown.output)
    assert shown.output.startswith(f"Usage: birddog {' '.join(path)} "), (where, shown.output)


def test_the_compose_services_are_wired_as_documented() -> None:
    """Services check their health, publish only to 127.0.0.1, and the worker leaves probes alone."""
    services = COMPOSE["services"]
    assert services["migrate"]["healthcheck"] == {"disable": True}
    assert services["birddog"]["healthcheck"]["test"] == ["CMD", "birddog", "health"]
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "birddog", "health", "--worker"]
    for service in services.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), port
    worker = services["worker"]["command"]
    queues = [worker[i + 1] for i, word in enumerate(worker) if word == "--queue"]
    assert not any(queue.startswith("birddog:") for queue in queues)
    # The tour's agent, by --agent: a worker for bob's sessions, not for every agent's mail.
    assert worker[worker.index("--agent") + 1] == "bob"
    module, _, function = worker[worker.index("--handler") + 1].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert "HEALTHCHECK" in DOCKERFILE
    assert re.search(r"^ENV .*BIRDDOG_METRICS_HOST=0\.0\.0\.0", DOCKERFILE, re.M)
    assert re.search(r"^ENV .*BIRDDOG_WORKER_METRICS_HOST=0\.0\.0\.0", DOCKERFILE, re.M)
    # The worker's health check asks its own /healthz, so its port is the default one.
    port = Settings.model_fields["worker_metrics_port"].default
    assert services["worker"]["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_the_systemd_units_do_not_restart_a_configuration_error_in_a_loop() -> None:
    """Each unit restarts on failure but not on exit status 2 (fix the configuration first)."""
    for unit in (ROOT / "deploy" / "systemd").glob("*.service"):
        text = unit.read_text()
        assert "Restart=on-failure" in text, unit.name
        assert "RestartPreventExitStatus=2" in text, unit.name


async def test_health_answers_for_a_running_daemon_and_fails_without_one(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """Birddog health exits 0 while the daemon's /healthz says ok, and 1 naming the URL otherwise."""
    port = free_port()
    nobody = await cli(database_url, "health", BIRDDOG_METRICS_PORT=str(port))
    assert nobody.returncode == 1
    assert f"no daemon answers at http://127.0.0.1:{port}/healthz" in nobody.stderr
    daemon = daemons(BIRDDOG_METRICS_PORT=str(port))

    async def healthy() -> bool:
        done = await cli(database_url, "health", BIRDDOG_METRICS_PORT=str(port))
        return done.returncode == 0 and done.stdout.strip() == "daemon healthy"

    await eventually(healthy, "birddog health to pass", within_s=60)
    assert daemon.terminate()[0] == 0


async def test_worker_health_follows_the_workers_heartbeat(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """Health --worker fails with no worker on this host, passes while one beats, not after."""
    alone = await cli(database_url, "health", "--worker")
    assert alone.returncode == 1
    assert "no worker on " in alone.stderr
    worker = daemons("--agent", "bob", "--handler", "examples.handler:handle", command="worker")

    async def beat() -> str | None:
        done = await cli(database_url, "health", "--worker")
        return done.stdout if done.returncode == 0 else None

    healthy = await eventually(beat, "health --worker to pass", within_s=60)
    assert healthy is not None
    assert healthy.startswith("worker healthy: 1 on ")
    assert worker.terminate()[0] == 0
    # A clean stop marks the worker's row stopped: no worker beats here any more.
    stopped = await cli(database_url, "health", "--worker")
    assert stopped.returncode == 1, stopped.stdout
