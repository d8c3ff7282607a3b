"""Public names imported on first use (PEP 562), so that a package's import stays cheap.

``birddog`` and ``birddog.engine`` re-export what their users need; every CLI command
starts by importing ``birddog``, and most never touch the delivery engine or the ask
store. A package lists where each name lives and sets its ``__getattr__`` to
:func:`exports`; type checkers read the same names from imports under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, homes: Mapping[str, str], *, renamed: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__``: each public name imported when first used.

    Args:
        package: the package's ``__name__``.
        homes: each public name and the module it lives in.
        renamed: names the package gives under another name than their home's.

    Returns:
        The package's ``__getattr__`` (it caches each name in the package) and its
        ``__dir__`` (the public names, as ``__all__`` lists them, and the lazy ones).
    """
    renames = dict(renamed or {})

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook's name
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), renames.get(name, name))
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook's name
        return sorted({*homes, *getattr(sys.modules[package], "__all__", ())})

    return __getattr__, __dir__
