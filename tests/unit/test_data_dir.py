"""Where the embedded server's data goes: as set, or under root one its user can reach."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from birddog.postgres.datadir import ROOT_DATA_HOME, blocking_directory, embedded_data_dir
from birddog.postgres.locate import data_location
from birddog.settings import Settings

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the fallback is for root only")


@pytest.fixture
def closed_home() -> Iterator[Path]:
    """A 0700 directory in /tmp, as root's home is, holding a checkout."""
    home = Path(tempfile.mkdtemp(prefix="bd-home-"))
    (home / "repo").mkdir()
    yield home
    shutil.rmtree(home)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A 0755 directory in /tmp, as /var/lib is."""
    where = Path(tempfile.mkdtemp(prefix="bd-open-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


@needs_root
def test_as_root_a_default_out_of_reach_moves_to_a_stable_directory(closed_home: Path) -> None:
    """Under root, a checkout's .birddog in a 0700 home becomes /var/lib/birddog/<repo>-<hash>."""
    default = closed_home / "repo" / ".birddog"
    chosen = embedded_data_dir(default, explicit=False)
    assert chosen.instead_of == default.resolve()
    assert chosen.path.parent == ROOT_DATA_HOME
    assert chosen.path.name.startswith("repo-")
    assert embedded_data_dir(default, explicit=False) == chosen  # every command agrees
    other = embedded_data_dir(closed_home / "other" / ".birddog", explicit=False)
    assert other.path != chosen.path  # two clones never share a database
    assert not chosen.path.exists()  # deciding creates nothing


@needs_root
def test_an_explicit_data_dir_is_kept_even_out_of_reach(closed_home: Path) -> None:
    """BIRDDOG_DATA_DIR is used as given: the start refuses it later, naming the parent."""
    wanted = closed_home / "data"
    assert embedded_data_dir(wanted, explicit=True).path == wanted.resolve()
    assert embedded_data_dir(wanted, explicit=True).instead_of is None
    assert blocking_directory(wanted, None) == (closed_home, 0o700)


def test_a_reachable_default_stays_where_it_is(open_dir: Path) -> None:
    """A default the server's user can reach (or any default when not root) is kept."""
    default = open_dir / ".birddog"
    assert embedded_data_dir(default, explicit=False).path == default.resolve()
    assert embedded_data_dir(default, explicit=False).instead_of is None


@needs_root
def test_the_ready_line_and_uri_say_where_the_data_went(
    closed_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The location for people names the chosen directory and the one it replaces."""
    monkeypatch.delenv("BIRDDOG_DATA_DIR", raising=False)
    monkeypatch.setattr(
        "birddog.settings.data_dir_for", lambda _package: closed_home / "repo" / ".birddog"
    )
    settings = Settings(database_url=None)
    assert "data_dir" not in settings.model_fields_set
    where = data_location(settings)
    assert where.startswith(f"embedded PostgreSQL in {ROOT_DATA_HOME}/repo-")
    assert f"cannot reach {closed_home / 'repo' / '.birddog'}" in where
    assert "set BIRDDOG_DATA_DIR to choose" in where
