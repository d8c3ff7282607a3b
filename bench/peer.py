"""Peers at their best: the same deliveries by PgQueuer and Procrastinate beside BirdDog.

The same replies POSTed to the same 50 inboxes, 20,000 of them (quick: 1,000;
``BENCH_PEER_COUNT`` sets another number), one job per reply, by three systems, each in
its own fresh database on the same server:

- **BirdDog**: one ``birddog run`` daemon (``bench/drain.py``'s round).
- **PgQueuer** (``bench/peer_pgqueuer.py``): one worker process, one job per signed
  reply, retried by its database retry executor, its documented throughput settings;
  tried at 16, 64 and 256 jobs in flight (``max_concurrent_tasks``).
- **Procrastinate** (``bench/peer_app.py``): one worker process, one task per reply;
  tried at a worker concurrency of 16, 64 and 256 (its pool one connection per job in
  flight, at most 64).

**Start-up is counted for none of them**, the same way for all three. Each round starts
a fresh process, idle, with an empty queue; warms it with 200 jobs (quick: 50), waited
for; then the measured jobs are committed in one transaction (BirdDog's rows, then its
wake; a peer's jobs written by its own API in an open transaction, committed when the
bench says so), and the clock runs from that commit to the last POST the inbox server
stamps (``CLOCK_MONOTONIC``, one clock for every process). Then the bench checks that
every job finished (BirdDog: a receipt per reply; PgQueuer: its queue empty;
Procrastinate: no job left to do) and that the inbox got every post. So the figure is
what a deployed daemon or worker does when work arrives, the same for each: its
imports, connections and first poll are outside it, as is the bookkeeping after the
last POST (a receipt, a completion flush). CPU per delivery (the process, PostgreSQL's
processes, the inbox) is read over the same window.

Rounds: full mode runs each of PgQueuer's configurations 3 times and takes the best
median; Procrastinate's configurations once each and the fastest twice more, the
median of its 3 counting (a round of it takes about ten times BirdDog's, and
configurations within one round's noise of each other are each its best within that
noise); BirdDog 3 times. The rounds of the three alternate, so a burst of other work on
the machine falls on all of them. Quick mode runs every configuration once, at 1,000
replies: a smoke of every path, not a measure.

Targets (issue 37): BirdDog at least 10 times Procrastinate's best, 1.6 times
PgQueuer's best, and at most 0.6 of PgQueuer's CPU per delivery (process + PostgreSQL).
The results name the configuration that won for each peer, with every round of every
configuration.
"""

from __future__ import annotations

import importlib.metadata
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import psutil

from bench import drain, peer_app, peer_pgqueuer
from bench.child import Child, kill
from bench.harness import (
    Context,
    DaemonProcess,
    Figure,
    TreeCpu,
    add_routes,
    agent_names,
    drop_database,
    fresh_database,
    ratio,
    wait_until,
)

AGENTS = 50
CONFIGURATIONS = (16, 64, 256)
"""Jobs in flight tried for each peer (PgQueuer's ``max_concurrent_tasks``, Procrastinate's
``concurrency``)."""
ROUNDS = 3
COUNT = {"quick": 1_000, "full": 20_000}
WARM = {"quick": 50, "full": 200}
PROCRASTINATE_TARGET = 10.0
PGQUEUER_TARGET = 1.6
CPU_TARGET = 0.6
"""BirdDog's CPU per delivery (daemon + PostgreSQL) at most this share of PgQueuer's."""
ROUND_DEADLINE_S = 600.0
"""The longest one round may take to deliver its jobs."""
RUN_DEADLINE_S = {"quick": 900.0, "full": 2_400.0}
"""The whole benchmark's bound (``bench/__main__.py``): 17 rounds in full mode, five of
them Procrastinate's at a few hundred deliveries a second (a slow hour: 130/s)."""


@dataclass(frozen=True)
class Peer:
    """A peer queue as the bench runs it: its child module, its knob, its progress query."""

    key: str
    title: str
    module: str
    knob: str
    install: Callable[[asyncpg.Connection], Awaitable[None]]
    pending_sql: str
    every_round: bool
    """Full mode: every configuration in every round (else in the first, then the best)."""

    def configuration(self, concurrency: int) -> str:
        """How a configuration reads in the results."""
        return f"{concurrency} in flight ({self.knob})"

    @property
    def version(self) -> str:
        """The installed package's version."""
        return importlib.metadata.version(self.key)


PGQUEUER = Peer(
    key="pgqueuer",
    title="PgQueuer",
    module="bench.peer_pgqueuer",
    knob="max_concurrent_tasks",
    install=peer_pgqueuer.install,
    pending_sql=peer_pgqueuer.PENDING_SQL,
    every_round=True,
)
PROCRASTINATE = Peer(
    key="procrastinate",
    title="Procrastinate",
    module="bench.peer_procrastinate",
    knob="concurrency",
    install=peer_app.install,
    pending_sql=peer_app.PENDING_SQL,
    every_round=False,
)


class Window:
    """CPU of a process, PostgreSQL and the inbox over a round's measured window."""

    def __init__(self, ctx: Context, process_cpu_s: Callable[[], float]) -> None:
        self.ctx = ctx
        self.process_cpu_s = process_cpu_s
        self.process = process_cpu_s()
        self.inbox = ctx.inbox.cpu_s()
        self.machine = psutil.cpu_times()
        self.postgres = TreeCpu(ctx.server.postmaster_pid).start()

    def stop(self, count: int) -> dict[str, Any]:
        """CPU per delivery of each, and how idle the machine was meanwhile."""
        postgres = self.postgres.stop()
        return {
            "worker_cpu_us_per_job": (self.process_cpu_s() - self.process) / count * 1e6,
            "postgres_cpu_us_per_job": postgres / count * 1e6,
            "inbox_cpu_us_per_job": (self.ctx.inbox.cpu_s() - self.inbox) / count * 1e6,
            "machine_idle_share": drain.idle_share(self.machine, psutil.cpu_times()),
        }


async def peer_round(ctx: Context, peer: Peer, *, concurrency: int, count: int) -> dict[str, Any]:
    """One round of ``peer`` at ``concurrency``: fresh database, idle worker, warm, measure."""
    warm = WARM["quick" if ctx.quick else "full"]
    dsn = await fresh_database(ctx.server, f"peer_{peer.key}", birddog=False)
    env = {"BENCH_PEER_DSN": dsn}
    conn = await asyncpg.connect(dsn)
    children: list[Child] = []
    try:
        await peer.install(conn)
        await ctx.inbox.reset()
        worker = Child([peer.module, "worker", str(concurrency)], env=env, name=peer.title)
        loader = Child(
            [peer.module, "load", ctx.inbox.base_url, str(count), str(AGENTS), str(warm)],
            env=env,
            name=f"{peer.title}'s loader",
        )
        children = [worker, loader]

        async def finished(posts: int) -> None:
            async def done() -> bool:
                worker.check_alive()
                if (await ctx.inbox.stats())["posts"] < posts:
                    return False
                return bool(await conn.fetchval(peer.pending_sql) == 0)

            await wait_until(done, timeout_s=ROUND_DEADLINE_S, what=f"{peer.title}'s {posts} jobs")

        await loader.expect("warm", timeout_s=120)
        await finished(warm)
        inserted = await loader.expect("inserted", timeout_s=300)
        await ctx.inbox.reset()
        window = Window(ctx, worker.cpu_s)
        loader.tell("commit")
        committed_ns = (await loader.finish())["committed_ns"]
        await finished(count)
        stats = await ctx.inbox.stats()
        cpu = window.stop(count)
        peak_rss_mb = worker.peak_rss_mb
        worker_result = await worker.stop()
    finally:
        kill(children)
        await conn.close()
        await drop_database(ctx.server, dsn)
    elapsed = (stats["last_ns"] - committed_ns) / 1e9
    return {
        "jobs": count,
        "concurrency": concurrency,
        "elapsed_s": round(elapsed, 3),
        "per_s": count / elapsed,
        **cpu,
        "worker_peak_rss_mb": peak_rss_mb,
        "inbox_posts": stats["posts"],
        "inbox_connections": stats["connections"],
        "insert_s": inserted["insert_s"],
        "worker": worker_result,
    }


async def birddog_round(ctx: Context, *, count: int, index: int) -> dict[str, Any]:
    """One round of ``birddog run``: fresh database, idle daemon, warm, measure."""
    dsn = await fresh_database(ctx.server, "peer_birddog")
    conn = await asyncpg.connect(dsn)
    daemon = DaemonProcess(dsn, ctx.tmp / "peer-daemon.log")
    try:
        await add_routes(conn, agent_names(AGENTS), ctx.inbox)
        daemon.start()
        await daemon.wait_listening(conn)
        warm = WARM["quick" if ctx.quick else "full"]
        await drain.product_round(ctx, conn, daemon, count=warm, prefix="warm")
        result = await drain.product_round(ctx, conn, daemon, count=count, prefix=f"peer{index}")
    finally:
        daemon.stop()
        await conn.close()
        await drop_database(ctx.server, dsn)
    # Timed as the peers are: from the wake's commit to the inbox's last arrival.
    to_last_receipt_s = result.pop("elapsed_s")
    elapsed = result.pop("to_last_post_s")
    return {
        **result,
        "elapsed_s": elapsed,
        "per_s": count / elapsed,
        "to_last_receipt_s": to_last_receipt_s,
    }


def median(rounds: list[dict[str, Any]], key: str) -> float:
    """The median of ``key`` over rounds."""
    return statistics.median(r[key] for r in rounds)


def cpu_per_delivery(result: dict[str, Any]) -> float:
    """The process's and PostgreSQL's CPU per delivery, µs (BirdDog's or a peer's round)."""
    if "daemon_cpu_us_per_reply" in result:
        return float(result["daemon_cpu_us_per_reply"] + result["postgres_cpu_us_per_reply"])
    return float(result["worker_cpu_us_per_job"] + result["postgres_cpu_us_per_job"])


class Sweep:
    """A peer's rounds by configuration; the best is the highest median rate."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.rounds: dict[int, list[dict[str, Any]]] = {c: [] for c in CONFIGURATIONS}

    def best(self) -> int:
        """The configuration with the highest median rate so far."""
        tried = [c for c in CONFIGURATIONS if self.rounds[c]]
        return max(tried, key=lambda c: median(self.rounds[c], "per_s"))

    def plan(self, index: int, quick: bool) -> list[int]:
        """The configurations round ``index`` runs (rotated, so that none always goes first)."""
        if quick or index == 0 or self.peer.every_round:
            shift = index % len(CONFIGURATIONS)
            return [*CONFIGURATIONS[shift:], *CONFIGURATIONS[:shift]]
        return [self.best()]

    def details(self) -> dict[str, Any]:
        """Every round of every configuration, their medians and the winner."""
        best = self.best()
        return {
            "version": self.peer.version,
            "knob": self.peer.knob,
            "best": best,
            "configuration": self.peer.configuration(best),
            "median_per_s": {
                str(c): median(rounds, "per_s") for c, rounds in self.rounds.items() if rounds
            },
            "rounds": {str(c): rounds for c, rounds in self.rounds.items() if rounds},
        }

    def figure(self, ours: float, *, count: int, target: float) -> Figure:
        """BirdDog's median rate against this peer's best configuration's."""
        best = self.best()
        theirs = median(self.rounds[best], "per_s")
        tried = "/".join(str(c) for c in CONFIGURATIONS)
        return Figure(
            name=f"deliveries/s, {count:,} replies: birddog run vs {self.peer.title} at best",
            value=ours,
            unit="replies/s",
            baseline=(
                f"{self.peer.title} {self.peer.version}, one worker, {best} in flight "
                f"({self.peer.knob}; best of {tried}), one job per reply"
            ),
            baseline_value=theirs,
            ratio=ratio(ours, theirs),
            ratio_note=f"birddog / {self.peer.key} (neither counts start-up)",
            target=f">= {target:g}x",
            met=ratio(ours, theirs) >= target,
            configuration=f"{self.peer.title} {self.peer.configuration(best)}",
        )


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """Alternate BirdDog's rounds with both peers' configurations; the best of each."""
    mode = "quick" if ctx.quick else "full"
    count = int(os.environ.get("BENCH_PEER_COUNT", "0")) or COUNT[mode]
    await ctx.inbox.configure()
    sweeps = [Sweep(PGQUEUER), Sweep(PROCRASTINATE)]
    ours: list[dict[str, Any]] = []
    began = time.monotonic()
    for index in range(1 if ctx.quick else ROUNDS):
        ours.append(await birddog_round(ctx, count=count, index=index))
        for sweep in sweeps:
            for concurrency in sweep.plan(index, ctx.quick):
                print(
                    f"   {sweep.peer.title} {sweep.peer.configuration(concurrency)} "
                    f"(round {index + 1}, {time.monotonic() - began:.0f} s in)",
                    file=sys.stderr,
                    flush=True,
                )
                sweep.rounds[concurrency].append(
                    await peer_round(ctx, sweep.peer, concurrency=concurrency, count=count)
                )
    pgqueuer, procrastinate = sweeps
    rate = median(ours, "per_s")
    ours_cpu = statistics.median(cpu_per_delivery(r) for r in ours)
    theirs_cpu = statistics.median(cpu_per_delivery(r) for r in pgqueuer.rounds[pgqueuer.best()])
    cpu = Figure(
        name="CPU per delivery, process + PostgreSQL: birddog run vs PgQueuer at best",
        value=ours_cpu,
        unit="µs/delivery",
        baseline=f"PgQueuer, {PGQUEUER.configuration(pgqueuer.best())}, worker + PostgreSQL",
        baseline_value=theirs_cpu,
        ratio=ratio(ours_cpu, theirs_cpu),
        ratio_note="birddog / pgqueuer, CPU over the same window",
        target=f"<= {CPU_TARGET:g}",
        met=ratio(ours_cpu, theirs_cpu) <= CPU_TARGET,
        configuration=f"PgQueuer {PGQUEUER.configuration(pgqueuer.best())}",
    )
    details = {
        "replies": count,
        "agents": AGENTS,
        "warm": WARM[mode],
        "timing": "commit of the jobs (BirdDog: its wake) to the inbox's last arrival; "
        "each process started idle and warmed; start-up counted for none",
        "versions": {
            "birddog": importlib.metadata.version("birddog"),
            "pgqueuer": PGQUEUER.version,
            "procrastinate": PROCRASTINATE.version,
        },
        "birddog": {"median_per_s": rate, "rounds": ours},
        "pgqueuer": pgqueuer.details(),
        "procrastinate": procrastinate.details(),
    }
    figures = [
        procrastinate.figure(rate, count=count, target=PROCRASTINATE_TARGET),
        pgqueuer.figure(rate, count=count, target=PGQUEUER_TARGET),
        cpu,
    ]
    return figures, details
