"""Every port has a fake in birddog.testing, shaped like it, and a contract suite runs both.

A new ``Protocol`` in :mod:`birddog.ports` fails here until :data:`birddog.testing.FAKES`
names its fake and a contract suite (``tests/integration/*_contract.py``, its ``PORTS``)
runs that fake and the real adapter against the same tests.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from birddog import ports
from birddog.testing import FAKES

CONTRACTS = Path(__file__).parents[1] / "integration"
"""Where the contract suites live."""


def port_names() -> list[str]:
    """The name of every ``Protocol`` class birddog.ports defines (in any of its modules)."""
    return sorted(
        name
        for name in ports.__all__
        if inspect.isclass(value := getattr(ports, name))
        and value.__module__.startswith(f"{ports.__name__}.")
        and getattr(value, "_is_protocol", False)
    )


def members(port: type) -> dict[str, Any]:
    """What a port declares (its own and its bases' methods and properties)."""
    declared: dict[str, Any] = {}
    for klass in reversed(port.__mro__):
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        declared.update(
            (name, value)
            for name, value in vars(klass).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        )
    return declared


def contracted_ports() -> dict[str, str]:
    """Each port a contract suite names in its ``PORTS``, and the suite."""
    named: dict[str, str] = {}
    for path in sorted(CONTRACTS.glob("*_contract.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "PORTS" for t in node.targets)
                and isinstance(node.value, ast.Tuple)
            ):
                for element in node.value.elts:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        named[element.value] = path.name
    return named


def test_every_port_has_a_fake() -> None:
    """Each Protocol of birddog.ports is named in FAKES, and FAKES names nothing else."""
    assert port_names(), "no port found in birddog.ports"
    assert sorted(FAKES) == port_names()


@pytest.mark.parametrize("name", port_names())
def test_each_fake_has_the_shape_of_its_port(name: str) -> None:
    """A fake has every method and property its port declares, async where the port's is."""
    port, fake = getattr(ports, name), FAKES[name]
    fields = (
        {field.name for field in dataclasses.fields(fake)}
        if dataclasses.is_dataclass(fake)
        else set()
    )
    for member, declared in members(port).items():
        if isinstance(declared, property):
            assert hasattr(fake, member) or member in fields, f"{fake.__name__} lacks {member}"
            continue
        implemented = getattr(fake, member, None)
        assert implemented is not None, f"{fake.__name__} lacks {member}"
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
            f"{fake.__name__}.{member} and {name}.{member} differ in being async"
        )


def test_every_port_is_run_by_a_contract_suite() -> None:
    """Each port is named in the PORTS of a contract suite that runs its fake and adapter."""
    named = contracted_ports()
    assert [name for name in port_names() if name not in named] == []
