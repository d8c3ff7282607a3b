"""The runtime SQL, loaded once from ``queries.sql`` into a dict of ``LiteralString``.

Each block in ``queries.sql`` reads::

    -- name: claim_page
    -- One line saying what the statement does.
    -- params: $1 after_key text, $2 now timestamptz, ...
    SELECT ...;

A part several statements share is written once, as a fragment block::

    -- fragment: outbox_lease
    -- One line saying what the part does.
    -- params: $1 claim uuid, $2 lease_until timestamptz
    UPDATE birddog.outbox o
    SET claim_token = $1::uuid, ...

and a statement names it where its text belongs: ``{{outbox_lease($4, $5)}}`` (or
``{{name}}`` for a fragment without parameters). Each use gives one ``$n`` of the
statement per parameter of the fragment, in order; the fragment's ``$1``, ``$2``... become
those. The fragment's lines after its first take the indentation of the line that names
it, so the statement reads as if written out. The substitution happens here, once, when
the file is loaded: every statement is a fixed text before any caller sees it, the same
text each time. Fragments do not nest. Loading refuses a statement that names an unknown
fragment or gives it the wrong number of parameters, a fragment whose text uses a
parameter it does not declare, and a fragment no statement uses.

Other full-line comments (section headings, notes) are ignored. The statements are
written by BirdDog and never assembled from strings at run time, so they are as safe as
literals in the code: values always travel as ``$n`` parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString

_BLOCK = re.compile(r"^-- (name|fragment): ([a-z][a-z0-9_]*)\s*$")
_PARAMS = re.compile(r"^-- params: (.+)$")
_PARAM = re.compile(r"\$(\d+)")
_USE = re.compile(r"\{\{\s*([a-z][a-z0-9_]*)\s*(?:\(([^{}]*)\))?\s*\}\}")
_ARGUMENT = re.compile(r"\$\d+")


@dataclass(frozen=True, slots=True)
class Query:
    """One named statement of ``queries.sql``.

    Attributes:
        name: the block's name.
        purpose: the one-line description.
        params: the parameters in order, as written (``none`` when there are none).
        sql: the statement, without comment lines, its fragments written out.
    """

    name: str
    purpose: str
    params: str
    sql: LiteralString


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str
    name: str
    purpose: str
    params: str
    body: str


def _block(kind: str, name: str, lines: list[str]) -> _Block:
    header = lines[:2]
    if len(header) < 2 or not header[0].startswith("-- ") or header[0].startswith("-- params:"):
        raise ValueError(f"queries.sql: {name!r} needs a one-line purpose after its name")
    params = _PARAMS.match(header[1])
    if params is None:
        raise ValueError(f"queries.sql: {name!r} needs a '-- params:' line after its purpose")
    body = "\n".join(
        line for line in lines[2:] if line.strip() and not line.lstrip().startswith("--")
    ).strip()
    if not body:
        raise ValueError(f"queries.sql: {name!r} has no statement")
    return _Block(
        kind=kind,
        name=name,
        purpose=header[0].removeprefix("-- ").strip(),
        params=params.group(1).strip(),
        body=body,
    )


def _arity(fragment: _Block) -> int:
    """How many parameters a fragment declares, checking its text uses no others."""
    declared = len(_PARAM.findall(fragment.params))
    if _USE.search(fragment.body):
        raise ValueError(
            f"queries.sql: fragment {fragment.name!r} names a fragment (they do not nest)"
        )
    for number in _PARAM.findall(fragment.body):
        if not 1 <= int(number) <= declared:
            raise ValueError(
                f"queries.sql: fragment {fragment.name!r} uses ${number}, "
                f"but declares {declared} parameter(s)"
            )
    return declared


def _expand(statement: _Block, fragments: Mapping[str, _Block], used: set[str]) -> str:
    """The statement's text with every fragment it names written out."""
    lines: list[str] = []
    for line in statement.body.split("\n"):
        indent = line[: len(line) - len(line.lstrip(" "))]

        def write_out(use: re.Match[str], indent: str = indent) -> str:
            name, given = use.group(1), use.group(2)
            fragment = fragments.get(name)
            if fragment is None:
                raise ValueError(f"queries.sql: {statement.name!r} names unknown fragment {name!r}")
            arguments = [part.strip() for part in given.split(",")] if given else []
            if len(arguments) != _arity(fragment) or not all(
                _ARGUMENT.fullmatch(argument) for argument in arguments
            ):
                raise ValueError(
                    f"queries.sql: {statement.name!r} gives fragment {name!r} "
                    f"({given or ''}); it takes one $n for each of: {fragment.params}"
                )
            used.add(name)
            text = _PARAM.sub(lambda param: arguments[int(param.group(1)) - 1], fragment.body)
            return text.replace("\n", "\n" + indent)

        lines.append(_USE.sub(write_out, line))
    sql = "\n".join(lines)
    if "{{" in sql or "}}" in sql:
        raise ValueError(f"queries.sql: {statement.name!r} has a malformed fragment use")
    return sql


def parse_queries(text: str) -> dict[str, Query]:
    """Parse the named blocks of a query file, writing out the fragments they name.

    Args:
        text: the file's contents.

    Returns:
        The queries by name, in file order (fragments are parts, not queries).

    Raises:
        ValueError: a block lacks its purpose, its ``-- params:`` line or its statement;
            a name is used twice; a statement names an unknown fragment or gives it the
            wrong parameters; a fragment uses an undeclared parameter, names another
            fragment, or is used by no statement.
    """
    raw: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        match = _BLOCK.match(line)
        if match:
            raw.append((match.group(1), match.group(2), []))
        elif raw:
            raw[-1][2].append(line)
    blocks: dict[str, _Block] = {}
    for kind, name, lines in raw:
        if name in blocks:
            raise ValueError(f"queries.sql: {name!r} is defined twice")
        blocks[name] = _block(kind, name, lines)
    fragments = {name: block for name, block in blocks.items() if block.kind == "fragment"}
    used: set[str] = set()
    queries: dict[str, Query] = {}
    for name, block in blocks.items():
        if block.kind != "name":
            continue
        queries[name] = Query(
            name=name,
            purpose=block.purpose,
            params=block.params,
            # BirdDog wrote every statement and fragment in the file, and the fragments
            # are written out here, once, from that text alone: none is built from input,
            # so each is as safe as a literal (mypy treats LiteralString as str, no cast).
            sql=_expand(block, fragments, used),
        )
    unused = sorted(fragments.keys() - used)
    if unused:
        raise ValueError(f"queries.sql: no statement uses fragment(s) {', '.join(unused)}")
    return queries


def _load() -> dict[str, Query]:
    text = (resources.files("birddog.postgres") / "queries.sql").read_text(encoding="utf-8")
    return parse_queries(text)


QUERIES: Mapping[str, Query] = _load()
"""Every named query, with its purpose and parameters."""

queries: Mapping[str, LiteralString] = {name: query.sql for name, query in QUERIES.items()}
"""The statements by name: ``queries["outbox_claim_page"]``."""
