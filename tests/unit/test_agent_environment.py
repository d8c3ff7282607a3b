"""What an agent process is given of the worker: an allow-listed environment, never its credentials."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from pydantic import AliasChoices

from birddog.settings import Settings, variable_of
from birddog.spawn import (
    AgentSetupRefused,
    agent_environment,
    check_passed_names,
    command_handler,
    run_as,
)

WORKER_ENVIRONMENT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/worker",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "LC_TIME": "en_GB.UTF-8",
    "TZ": "Europe/Paris",
    "DATABASE_URL": "postgresql://postgres:hunter2@db/birddog",
    "database_url": "postgresql://postgres:hunter2@db/birddog",
    "Database_Url": "postgresql://postgres:hunter2@db/birddog",
    "PGPASSWORD": "hunter2",
    "pgpassword": "hunter2",
    "PGPASSFILE": "/srv/birddog/.birddog/pgpass",
    "BIRDDOG_SECRET_KEY": "c2VjcmV0",
    "birddog_secret_key": "c2VjcmV0",
    "BIRDDOG_ALERT_SECRET": "whsec_c2VjcmV0",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ANTHROPIC_API_KEY": "sk-ant-abc",
    "SSH_AUTH_SOCK": "/run/user/0/ssh-agent",
    "LD_PRELOAD": "/opt/evil.so",
}


def test_an_agent_gets_the_allow_list_and_nothing_else() -> None:
    """PATH, HOME, LANG, LC_* and TZ pass; every other variable of the worker stays behind."""
    allowed = ("PATH", "HOME", "LANG", "LC_ALL", "LC_TIME", "TZ")
    assert agent_environment(WORKER_ENVIRONMENT) == {
        name: WORKER_ENVIRONMENT[name] for name in allowed
    }


def test_a_passed_name_reaches_the_agent_but_never_a_credential_in_any_case() -> None:
    """--env ANTHROPIC_API_KEY passes it; lower- and mixed-case credentials never pass at all."""
    env = agent_environment(WORKER_ENVIRONMENT, passed=["ANTHROPIC_API_KEY", "database_url"])
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-abc"
    assert not any("hunter2" in value or "c2VjcmV0" in value for value in env.values())
    assert {name.upper() for name in env} & {"DATABASE_URL", "PGPASSWORD"} == set()


def test_another_users_home_replaces_the_workers() -> None:
    """An agent run as another user finds that user's HOME, not the worker's."""
    assert agent_environment(WORKER_ENVIRONMENT, home="/home/agent")["HOME"] == "/home/agent"


@pytest.mark.parametrize(
    "name",
    ["DATABASE_URL", "database_url", "Database_Url", "PGPASSWORD", "pgpassfile", "PGHOST",
     "BIRDDOG_SECRET_KEY", "birddog_secret_key", "BIRDDOG_JOB_ID"],
)  # fmt: skip
def test_passing_the_workers_credentials_is_refused_up_front(name: str) -> None:
    """--env naming DATABASE_URL, PG* or BIRDDOG_* (any case) is a one-line refusal at start."""
    with pytest.raises(AgentSetupRefused) as caught:
        check_passed_names([name])
    assert "never passed to agents" in str(caught.value)
    with pytest.raises(AgentSetupRefused):
        command_handler("cat", env=[name])


@pytest.mark.parametrize("name", ["", "A=B", "1ABC", "two words", "x" * 300 + "-"])
def test_a_passed_name_must_be_a_variable_name(name: str) -> None:
    """--env takes names only (no values); a bad one is refused, cut to 200 characters."""
    with pytest.raises(AgentSetupRefused, match="not a variable name") as caught:
        check_passed_names([name])
    assert len(str(caught.value)) < 260


def test_an_unknown_user_or_the_workers_own_is_refused() -> None:
    """--user names a user of this host other than the worker's; else a clear refusal."""
    if os.geteuid() != 0:
        with pytest.raises(AgentSetupRefused, match="needs the worker to run as root"):
            run_as("nobody")
        return
    with pytest.raises(AgentSetupRefused, match="no such user"):
        run_as("birddog-no-such-user-x9")
    with pytest.raises(AgentSetupRefused, match="worker's own user"):
        run_as(pwd.getpwuid(os.geteuid()).pw_name)


def test_a_cwd_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    """--cwd must name a directory; a file or a missing path is refused at start."""
    afile = tmp_path / "file"
    afile.write_text("")
    for where in (afile, tmp_path / "missing"):
        with pytest.raises(AgentSetupRefused, match="not a directory"):
            command_handler("cat", cwd=where)


# ---- the worker's own settings: upper-case names only --------------------------------


def test_every_setting_is_read_from_its_upper_case_variable_only() -> None:
    """Each field's variable is BIRDDOG_<FIELD> (DATABASE_URL for the database), upper case."""
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names = alias.choices if isinstance(alias, AliasChoices) else [alias]
        assert variable_of(name) in names, name
        assert all(str(choice).isupper() for choice in names), name


def test_lower_and_mixed_case_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """database_url, birddog_secret_key and Birddog_Page_Size in the environment are ignored."""
    for name in list(os.environ):
        if name.upper().startswith("BIRDDOG_") or name.upper() == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("database_url", "postgresql://attacker@evil/birddog")
    monkeypatch.setenv("birddog_secret_key", "not-base64!")
    monkeypatch.setenv("Birddog_Page_Size", "7")
    monkeypatch.setenv("BIRDDOG_LEASE_S", "45")
    settings = Settings()
    assert (settings.database_url, settings.secret_key, settings.page_size) == (None, None, 64)
    assert settings.lease_s == 45


def test_settings_in_code_take_field_names_and_refuse_unknown_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settings(page_size=5) wins over the environment; a name that is no setting is an error."""
    monkeypatch.setenv("BIRDDOG_PAGE_SIZE", "7")
    assert Settings().page_size == 7
    assert Settings(page_size=5).page_size == 5
    assert Settings(database_url="postgresql://h/db").database_url == "postgresql://h/db"
    assert Settings().model_copy(update={"page_size": 3}).page_size == 3
    with pytest.raises(ValueError, match="page_sise"):
        Settings(page_sise=5)
