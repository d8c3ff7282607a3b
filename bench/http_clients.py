"""aiohttp (as used, and tuned) vs pyreqwest vs httpx on loopback: which client carries the posts.

A real aiohttp server runs in a child process on 127.0.0.1 and answers every POST with
``{"accepted": true}``. Each client posts the same signed ~1 KB reply N times with a
fixed concurrency, reads the answer (bounded) and parses it, as the transport does.
Clients: ``aiohttp`` as the transport uses it (a session without cookies, headers
given as a dict per post); ``aiohttp-tuned`` (no cookie jar, no automatic headers, no
decompression, one pre-built header set per route with only the per-post headers
added); ``pyreqwest`` (a Rust client with an asyncio API: no redirects, no
decompression, no cookie store, the answer streamed and read up to the bound);
``httpx``; and the real transports (route lookup, signing, bounded read,
classification) to show BirdDog's own overhead on top of each client.
Rounds alternate between the clients; the median round is reported as posts/s and as
client CPU microseconds per post (the server is shared, so CPU per post is the fairer
comparison when the server is the bottleneck).

Run::

    .venv/bin/python bench/http_clients.py            # N=2000, concurrency 64, 3 rounds
    .venv/bin/python bench/http_clients.py --n 500 --rounds 1
    .venv/bin/python bench/http_clients.py --uvloop --only aiohttp,pyreqwest

Bounded: every round has a deadline (``--deadline-s``), and the server child is
stopped by pid when the run ends.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httpx
import orjson
import yarl
from aiohttp import web
from multidict import CIMultiDict

from birddog import Accepted, AgentAddress, Reply, ReplyFacts
from birddog.clock import SystemClock
from birddog.http import HttpTransport, StaticRoutes, signing
from birddog.ports import Route

MAX_BODY_BYTES = 65536


def _serve() -> None:
    """Child mode: serve the inbox on an ephemeral port and print it."""

    async def inbox(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"accepted": True})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/inbox", inbox)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        print(port, flush=True)
        # The parent stops us by closing our stdin (or by pid).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(main())


def _reply(index: int) -> Reply:
    return Reply(
        key=f"outbox:bench-mail-{index}:reply:0",
        in_reply_to=f"bench-mail-{index}",
        to=AgentAddress(agent_id="caller", session_id="s-1"),
        from_=AgentAddress(agent_id="worker", session_id="s-2"),
        content="x" * 800,
        created_at=1_767_225_600_000,
        reply=ReplyFacts(command_id="command-1", outcome="completed"),
    )


def _request(index: int, secret: str) -> tuple[bytes, dict[str, str]]:
    reply = _reply(index)
    body = reply.model_dump_json().encode()
    headers = signing.headers(secret, msg_id=reply.key, timestamp=int(time.time()), body=body)
    headers["content-type"] = "application/json"
    headers["user-agent"] = "birddog-bench"
    return body, headers


Post = Callable[[int], Awaitable[None]]


def _check(status: int, data: bytes) -> None:
    """The answer every client must get: 200 with an explicit acknowledgement."""
    assert status == 200
    assert orjson.loads(data) == {"accepted": True}


@dataclass
class Round:
    client: str
    seconds: float
    cpu_s: float
    n: int

    @property
    def posts_per_s(self) -> float:
        return self.n / self.seconds

    @property
    def cpu_us_per_post(self) -> float:
        return self.cpu_s / self.n * 1e6


async def _drive(post: Post, *, n: int, concurrency: int, deadline_s: float) -> None:
    queue = iter(range(n))

    async def worker() -> None:
        for index in queue:
            await post(index)

    async with asyncio.timeout(deadline_s):
        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _aiohttp_round(
    url: str, secret: str, *, n: int, concurrency: int, deadline_s: float
) -> None:
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:

        async def post(index: int) -> None:
            body, headers = _request(index, secret)
            async with session.post(url, data=body, headers=headers) as resp:
                _check(resp.status, await resp.content.read(MAX_BODY_BYTES + 1))

        await _drive(post, n=n, concurrency=concurrency, deadline_s=deadline_s)


async def _httpx_round(
    url: str, secret: str, *, n: int, concurrency: int, deadline_s: float
) -> None:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    # No per-request timeout: each round has its own deadline, as for aiohttp.
    async with httpx.AsyncClient(limits=limits, timeout=None) as client:  # noqa: S113

        async def post(index: int) -> None:
            body, headers = _request(index, secret)
            async with client.stream("POST", url, content=body, headers=headers) as resp:
                data = b""
                async for chunk in resp.aiter_bytes():
                    data += chunk
                    if len(data) > MAX_BODY_BYTES:
                        break
                _check(resp.status_code, data)

        await _drive(post, n=n, concurrency=concurrency, deadline_s=deadline_s)


async def _transport_round(
    url: str, secret: str, *, n: int, concurrency: int, deadline_s: float
) -> None:
    """The real HttpTransport: route lookup, pydantic JSON, signing, bounded read, classify."""
    routes = StaticRoutes([Route(agent_id="caller", url=url, secret=secret)])
    async with HttpTransport(routes, clock=SystemClock()) as http:

        async def post(index: int) -> None:
            assert await http.post(_reply(index)) == Accepted()

        await _drive(post, n=n, concurrency=concurrency, deadline_s=deadline_s)


async def _aiohttp_tuned_round(
    url: str, secret: str, *, n: int, concurrency: int, deadline_s: float
) -> None:
    """aiohttp with nothing this job does not need, and one header set per route."""
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("accept", "accept-encoding", "user-agent"),
        auto_decompress=False,
        trust_env=False,
    ) as session:
        route_headers = CIMultiDict(
            {"content-type": "application/json", "user-agent": "birddog-bench"}
        )
        target = yarl.URL(url)

        async def post(index: int) -> None:
            body, signed = _request(index, secret)
            headers = route_headers.copy()
            headers.update(
                (name, value) for name, value in signed.items() if name.startswith("webhook-")
            )
            async with session.post(
                target, data=body, headers=headers, allow_redirects=False
            ) as resp:
                _check(resp.status, await resp.content.read(MAX_BODY_BYTES + 1))

        await _drive(post, n=n, concurrency=concurrency, deadline_s=deadline_s)


async def _pyreqwest_round(
    url: str, secret: str, *, n: int, concurrency: int, deadline_s: float
) -> None:
    """pyreqwest configured as a transport would be: no redirects, decompression or cookies."""
    from pyreqwest.client import ClientBuilder  # noqa: PLC0415

    builder = (
        ClientBuilder()
        .follow_redirects(False)
        .gzip(False)
        .brotli(False)
        .zstd(False)
        .deflate(False)
        .referer(False)
        .no_proxy()
        .http1_lower_case_headers()
        .default_headers({"content-type": "application/json"})
        .user_agent("birddog-bench")
    )
    async with builder.build() as client:

        async def post(index: int) -> None:
            body, signed = _request(index, secret)
            headers = {k: v for k, v in signed.items() if k.startswith("webhook-")}
            request = (
                client.post(url)
                .headers(headers)
                .body_bytes(body)
                .streamed_read_buffer_limit(MAX_BODY_BYTES + 1)
                .build_streamed()
            )
            async with request as resp:
                data = b""
                while (
                    chunk := await resp.body_reader.read(MAX_BODY_BYTES + 1 - len(data))
                ) is not None:
                    data += bytes(chunk)
                    if len(data) > MAX_BODY_BYTES:
                        break
                _check(resp.status, data)

        await _drive(post, n=n, concurrency=concurrency, deadline_s=deadline_s)


CLIENTS = {
    "aiohttp": _aiohttp_round,
    "aiohttp-tuned": _aiohttp_tuned_round,
    "pyreqwest": _pyreqwest_round,
    "httpx": _httpx_round,
    "HttpTransport": _transport_round,
}


async def _measure(args: argparse.Namespace, url: str) -> list[Round]:
    secret = signing.generate_secret()
    rounds: list[Round] = []
    chosen = {name: CLIENTS[name] for name in args.only}
    for run in chosen.values():  # warm-up: imports, first connections, caches
        await run(url, secret, n=min(200, args.n), concurrency=args.concurrency, deadline_s=30)
    for _ in range(args.rounds):
        for client, run in chosen.items():
            cpu0, t0 = time.process_time(), time.perf_counter()
            await run(
                url, secret, n=args.n, concurrency=args.concurrency, deadline_s=args.deadline_s
            )
            rounds.append(
                Round(client, time.perf_counter() - t0, time.process_time() - cpu0, args.n)
            )
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=2000, help="POSTs per round (default 2000)")
    parser.add_argument("--concurrency", type=int, default=64, help="in flight (default 64)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per client (default 3)")
    parser.add_argument("--deadline-s", type=float, default=60.0, help="per round (default 60)")
    parser.add_argument(
        "--only", default=",".join(CLIENTS), help="comma-separated clients (default: all)"
    )
    parser.add_argument("--uvloop", action="store_true", help="run the clients on uvloop")
    args = parser.parse_args()
    args.only = [name for name in args.only.split(",") if name]
    unknown = set(args.only) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients: {', '.join(sorted(unknown))}")
    if args.serve:
        _serve()
        return
    server = subprocess.Popen(  # noqa: S603 -- our own interpreter and file
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}/inbox"
        if args.uvloop:
            import uvloop  # noqa: PLC0415

            rounds = uvloop.run(_measure(args, url))
        else:
            rounds = asyncio.run(_measure(args, url))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    loop = "uvloop" if args.uvloop else "asyncio"
    print(f"loopback POSTs: n={args.n} concurrency={args.concurrency} rounds={args.rounds} {loop}")
    print(
        f"{'client':16} {'posts/s (median)':>17} {'min':>8} {'max':>8}"
        f" {'CPU us/post (median)':>21} {'min':>6} {'max':>6}"
    )
    for client in args.only:
        mine = [r for r in rounds if r.client == client]
        rates = [r.posts_per_s for r in mine]
        cpus = [r.cpu_us_per_post for r in mine]
        print(
            f"{client:16} {statistics.median(rates):17.0f} {min(rates):8.0f} {max(rates):8.0f}"
            f" {statistics.median(cpus):21.0f} {min(cpus):6.0f} {max(cpus):6.0f}"
        )


if __name__ == "__main__":
    main()
