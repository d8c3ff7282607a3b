"""Run the benchmarks: ``python -m bench [--quick] [--only NAME[,NAME]] [--profile]``.

One PostgreSQL server (``DATABASE_URL``, else an embedded one in a temporary directory)
and one inbox server process serve the whole run; each benchmark gets its own fresh
database. Results go to ``bench/results/<name>.json`` (quick mode:
``bench/results/quick/<name>.json``) and a table is printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import (
    RESULTS,
    Context,
    Figure,
    InboxProcess,
    machine_info,
    postgres_info,
    postgres_server,
    write_result,
)

BENCHMARKS = (
    "drain",
    "wake",
    "fanout",
    "backlog",
    "slow",
    "concentrated",
    "hanging",
    "peer",
    "ask",
    "batch",
    "scale",
    "claim",
    "turns",
)
"""In run order. Each is ``bench/<name>.py`` with ``async def run(ctx)``."""

DEADLINE_S = {"quick": 300.0, "full": 900.0}
"""No benchmark runs longer than this (each also bounds itself), unless its module sets
its own ``RUN_DEADLINE_S`` (the same shape): one that runs many rounds by design."""

NOTE = (
    "2 cores shared by PostgreSQL, the daemon (or baseline/peer) and the inbox server; "
    "other work may share the machine (see load_avg)."
)


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(BENCHMARKS)}")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the daemon during the drain benchmark"
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the saved results (bench/results/*.json) as a markdown table; run nothing",
    )
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    args.names = wanted or list(BENCHMARKS)
    return args


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """The figures as a plain-text table."""
    lines = [
        f"{'benchmark':<9} {'figure':<52} {'value':>14} {'baseline':>14} "
        f"{'ratio':>9} {'target':>10} met"
    ]
    for name, figure in rows:
        lines.append(
            f"{name:<9} {figure['name'][:52]:<52} "
            f"{_num(figure['value']):>9} {figure['unit'][:4]:<4} "
            f"{_num(figure['baseline_value']):>14} {_num(figure['ratio']):>9} "
            f"{figure['target'][:10]:>10} "
            f"{'-' if figure['met'] is None else ('yes' if figure['met'] else 'NO')}"
        )
        if figure.get("configuration"):
            lines.append(f"{'':<10}configuration: {figure['configuration']}")
    return "\n".join(lines)


def markdown(results: Path) -> str:
    """The saved results of every benchmark as a markdown table, with their commands."""
    lines = [
        "| benchmark | figure | value | baseline | baseline value | ratio | target | met |",
        "| --- | --- | ---: | --- | ---: | ---: | --- | --- |",
    ]
    commands = []
    for name in BENCHMARKS:
        path = results / f"{name}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        commands.append(f"`{data['command']}` ({data['started_at']}, {data['duration_s']} s)")
        if "error" in data:
            lines.append(f"| {name} | did not finish: {data['error']} | | | | | | |")
        for figure in data["figures"]:
            met = "" if figure["met"] is None else ("yes" if figure["met"] else "**no**")
            chosen = figure.get("configuration")
            baseline = f"{figure['baseline']} (won: {chosen})" if chosen else figure["baseline"]
            lines.append(
                f"| {name} | {figure['name']} | {_num(figure['value'])} {figure['unit']} | "
                f"{baseline} | {_num(figure['baseline_value'])} | "
                f"{_num(figure['ratio'])} ({figure['ratio_note']}) | {figure['target']} | {met} |"
            )
    return "\n".join([*lines, "", "Reproduce:", *(f"- {c}" for c in commands)])


def _num(value: float) -> str:
    if value != value:  # noqa: PLR0124 - NaN
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


async def main(args: argparse.Namespace) -> int:
    """Run the chosen benchmarks; 0 when all of them ran (targets do not set the code)."""
    mode = "quick" if args.quick else "full"
    results = RESULTS / "quick" if args.quick else RESULTS
    if os.environ.get("BENCH_DAEMON"):
        # A prototype daemon's figures never overwrite the product's.
        results = RESULTS / "experiment" / os.environ["BENCH_DAEMON"].rsplit(".", 1)[-1] / mode
    elif os.environ.get("BENCH_SCHEMA_DDL"):
        results = RESULTS / "experiment" / "schema_ddl" / mode
    if args.report:
        print(markdown(results))
        return 0
    results.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="birddog-bench-"))
    rows: list[tuple[str, dict[str, Any]]] = []
    failed: list[str] = []
    try:
        async with postgres_server(tmp) as server:
            postgres = await postgres_info(server.dsn)
            inbox = InboxProcess()
            await inbox.start()
            ctx = Context(
                server=server,
                inbox=inbox,
                tmp=tmp,
                quick=args.quick,
                profile=args.profile,
                results=results,
            )
            try:
                for name in args.names:
                    print(f"== {name} ({mode})", file=sys.stderr, flush=True)
                    data = await run_one(ctx, name, mode=mode, postgres=postgres)
                    write_result(results / f"{name}.json", data)
                    if "error" in data:
                        failed.append(name)
                        print(f"   FAILED: {data['error']}", file=sys.stderr, flush=True)
                    for figure in data.get("figures", []):
                        rows.append((name, figure))
                        chosen = figure.get("configuration")
                        print(
                            f"   {figure['name']}: {_num(figure['value'])} {figure['unit']}"
                            f" (baseline {_num(figure['baseline_value'])}, ratio"
                            f" {_num(figure['ratio'])})" + (f"; won: {chosen}" if chosen else ""),
                            file=sys.stderr,
                            flush=True,
                        )
            finally:
                await inbox.stop()
    finally:
        if os.environ.get("BENCH_KEEP_TMP"):  # the daemons' logs, to read after a run
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(rows))
    print(f"\nresults: {results}/<name>.json   machine: {NOTE}")
    if failed:
        print(f"benchmarks that did not finish: {', '.join(failed)}")
    return 1 if failed else 0


async def run_one(
    ctx: Context, name: str, *, mode: str, postgres: dict[str, Any]
) -> dict[str, Any]:
    """Run one benchmark, bounded; its result document (with ``error`` if it failed)."""
    module = importlib.import_module(f"bench.{name}")
    started = time.monotonic()
    data: dict[str, Any] = {
        "benchmark": name,
        "mode": mode,
        "command": ctx.command(name),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "machine_note": NOTE,
        "postgres": postgres,
        "database_url_given": bool(os.environ.get("DATABASE_URL")),
    }
    try:
        figures: list[Figure]
        deadline_s = getattr(module, "RUN_DEADLINE_S", DEADLINE_S)[mode]
        figures, details = await asyncio.wait_for(module.run(ctx), deadline_s)
    except Exception as exc:  # a failed benchmark is reported; the others still run
        data["error"] = f"{type(exc).__name__}: {exc}"
        data["traceback"] = traceback.format_exc()
        figures, details = [], {}
    data["duration_s"] = round(time.monotonic() - started, 1)
    data["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    data["figures"] = [figure.as_dict() for figure in figures]
    data["details"] = details
    return data


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
