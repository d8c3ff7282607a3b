"""The README's configuration table and the CLI's environment twins match the code."""

from __future__ import annotations

import re
from pathlib import Path

import click
import platformdirs
import pytest

from birddog.cli import main
from birddog.settings import Settings, data_dir_for

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT_IS_COMPUTED = {"data_dir"}  # depends on where BirdDog runs; the README explains it


def _env_name(field: str) -> str:
    return "DATABASE_URL" if field == "database_url" else f"BIRDDOG_{field.upper()}"


def _table() -> dict[str, str]:
    """Each documented variable with the default the README gives it."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        names_cell, default_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
        names = re.findall(r"`([A-Z_]+)`", names_cell)
        defaults = re.findall(r"`([^`]*)`", default_cell)
        if default_cell == "unset":
            defaults = ["unset"] * len(names)
        if len(names) == 1:
            defaults = defaults[:1]  # "`a` in a checkout, else `b`": the first case
        assert len(defaults) == len(names), line
        documented.update(zip(names, defaults, strict=True))
    return documented


def _same(shown: str, default: object) -> bool:
    if shown == "unset":
        return default in (None, "")
    if isinstance(default, bool | str):
        return shown == str(default)
    if isinstance(default, int | float):
        return float(shown) == float(default)
    return shown == str(default)


def test_every_setting_is_documented_with_its_default() -> None:
    """Each Settings field has a README row under its variable name, with the real default."""
    documented = _table()
    for name, field in Settings.model_fields.items():
        variable = _env_name(name)
        assert variable in documented, f"{variable} is missing from the README table"
        if name not in DEFAULT_IS_COMPUTED:
            assert _same(documented[variable], field.default), (variable, documented[variable])


def test_the_readme_documents_no_setting_that_does_not_exist() -> None:
    """Every variable in the README table is read by Settings."""
    known = {_env_name(name) for name in Settings.model_fields}
    assert set(_table()) <= known


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += _commands(sub, (*path, name))
    return found


def _command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", _commands(main), ids=lambda path: " ".join(path) or "birddog")
def test_every_option_shows_its_environment_twin_named_after_the_flag(
    path: tuple[str, ...],
) -> None:
    """--help of every command names each option's variable, BIRDDOG_<COMMAND>_<FLAG>."""
    command = _command_at(path)
    with click.Context(command, info_name=" ".join(("birddog", *path))) as ctx:
        shown = command.get_help(ctx)
    for option in command.params:
        if not isinstance(option, click.Option) or option.is_eager:
            continue
        assert option.show_envvar
        if option.name == "database_url":
            assert option.envvar == "DATABASE_URL"
        else:
            flag = max(option.opts, key=len).lstrip("-").replace("-", "_").upper()
            prefix = "_".join(("BIRDDOG", *(p.replace("-", "_").upper() for p in path)))
            assert option.envvar == f"{prefix}_{flag}"
        assert f"env var: {option.envvar}" in " ".join(shown.split()), option.opts


def test_a_checkout_keeps_its_data_in_dot_birddog(tmp_path: Path) -> None:
    """From a git checkout (src/birddog beside pyproject.toml) data goes to ./.birddog."""
    package = tmp_path / "clone" / "src" / "birddog"
    package.mkdir(parents=True)
    (tmp_path / "clone" / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "clone" / ".git").mkdir()
    assert data_dir_for(package) == tmp_path / "clone" / ".birddog"


def test_an_installed_package_keeps_its_data_in_the_xdg_directory(tmp_path: Path) -> None:
    """Installed from a wheel (site-packages/birddog) data goes to the XDG data directory."""
    package = tmp_path / "lib" / "site-packages" / "birddog"
    package.mkdir(parents=True)
    assert data_dir_for(package) == Path(platformdirs.user_data_dir("birddog"))


def test_this_checkout_uses_its_own_data_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests run from a checkout, so the default is this checkout's .birddog."""
    monkeypatch.delenv("BIRDDOG_DATA_DIR", raising=False)
    assert Settings().data_dir == README.parent / ".birddog"
