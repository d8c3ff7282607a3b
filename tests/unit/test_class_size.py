"""No class in src/ grows past about fifteen methods of its own logic (issue 20).

A method of logic is a ``def`` or ``async def`` in the class body, except a one-line
delegation: a body that is (after its docstring) one ``return`` or expression of a call,
an attribute or a name, awaited or not. A class that needs more is split along a seam a
reader would name (as ``EmbeddedPostgres``: its data directory, its programs, its users).
"""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

SOURCE = Path(str(resources.files("birddog")))

MOST_METHODS = 15
"""The most methods of logic one class may hold."""


def _is_delegation(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``function`` only hands its work on, in one line (after a docstring)."""
    body = list(function.body)
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    value = body[0].value
    if isinstance(value, ast.Await):
        value = value.value
    return isinstance(value, ast.Call | ast.Attribute | ast.Name)


def methods_of_logic(tree: ast.AST) -> dict[str, int]:
    """Each class of ``tree`` (by name) and how many methods of logic its body holds."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            counts[node.name] = sum(
                isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and not _is_delegation(item)
                for item in node.body
            )
    return counts


def test_no_class_holds_more_than_fifteen_methods_of_logic() -> None:
    """Every class in src/birddog holds at most 15 methods of logic."""
    files = sorted(SOURCE.rglob("*.py"))
    assert len(files) > 50, "the scan found too few files to mean anything"
    counts = {
        f"{path.relative_to(SOURCE).as_posix()}:{name}": count
        for path in files
        for name, count in methods_of_logic(ast.parse(path.read_text(encoding="utf-8"))).items()
    }
    too_big = {where: count for where, count in counts.items() if count > MOST_METHODS}
    assert too_big == {}


def test_the_count_leaves_out_one_line_delegations() -> None:
    """Methods with logic count; a docstring and one call, attribute or name do not."""
    tree = ast.parse(
        '''
class Example:
    def __init__(self, part):
        self.part = part

    @property
    def name(self):
        """Its name."""
        return self.part.name

    async def handed_on(self, x):
        return await self.part.handed_on(x)

    def told(self):
        self.part.told()

    def decides(self, x):
        if x:
            return 1
        return 2

    async def waits(self):
        result = await self.part.wait()
        return result
'''
    )
    assert methods_of_logic(tree) == {"Example": 3}
