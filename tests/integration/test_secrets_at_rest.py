"""Route secrets sealed in PostgreSQL, re-sealed under new keys, and rotated with overlap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from birddog.clock import SystemClock
from birddog.core.delivery import Accepted, Failed
from birddog.core.errors import RouteNotFound, SecretUnreadable
from birddog.http import HttpTransport
from birddog.http.inbox import Inbox
from birddog.ports import Clock
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from birddog.sealing import SEALED_PREFIX, SecretBox, generate_key
from birddog.testing import FrozenClock
from tests.support import make_reply
from tests.support.inbox import posts_to

OLD_KEY, NEW_KEY = generate_key(), generate_key()
DAY_S = 86400.0


def routes_with(
    pool: Pool, key: str | None, previous: str = "", *, clock: Clock | None = None
) -> PostgresRoutes:
    return PostgresRoutes(
        pool,
        cache_s=0,
        box=SecretBox.from_settings(key, previous),
        clock=clock or SystemClock(),
    )


async def stored(pool: Pool, agent_id: str) -> tuple[str | None, str | None]:
    row = await pool.fetchrow(
        "SELECT secret, previous_secret FROM birddog.routes WHERE agent_id = $1", agent_id
    )
    assert row is not None
    return row["secret"], row["previous_secret"]


async def test_with_a_key_the_database_holds_only_sealed_secrets(pg_pool: Pool) -> None:
    """A route added with BIRDDOG_SECRET_KEY is stored sealed and read back plain."""
    routes = routes_with(pg_pool, NEW_KEY)
    added = await routes.add("alice", "http://127.0.0.1:9/hook")
    secret, _ = await stored(pg_pool, "alice")
    assert secret is not None
    assert secret.startswith(SEALED_PREFIX)
    assert added.secret is not None
    assert added.secret.removeprefix("whsec_") not in secret
    found = await routes.route("alice")
    assert found is not None
    assert found.secret == added.secret
    assert [r.secret for r in await routes.list()] == [None]


async def test_without_the_key_a_sealed_route_is_unreadable_and_its_post_fails(
    pg_pool: Pool,
) -> None:
    """A daemon without the key cannot read the secret: the post fails naming the key id."""
    await routes_with(pg_pool, NEW_KEY).add("alice", "http://127.0.0.1:9/hook")
    keyless = routes_with(pg_pool, None)
    with pytest.raises(SecretUnreadable):
        await keyless.route("alice")
    async with HttpTransport(keyless, clock=SystemClock()) as transport:
        result = await transport.post(make_reply("outbox:m:reply:0", agent="alice"))
    assert isinstance(result, Failed)
    new_key_id = SecretBox.from_settings(NEW_KEY).key_id
    assert new_key_id is not None
    assert new_key_id in result.reason
    assert "whsec_" not in result.reason


async def test_rekey_seals_plain_secrets_then_moves_them_to_a_new_key(pg_pool: Pool) -> None:
    """Rekey seals plain secrets, moves them from the old key to the new, and back to plain."""
    plain = routes_with(pg_pool, None)
    first = await plain.add("alice", "http://127.0.0.1:9/a")
    await plain.add("bob", "http://127.0.0.1:9/b")
    await plain.add("box", kind="mailbox")

    report = await routes_with(pg_pool, OLD_KEY).reseal()
    assert (report.routes, report.resealed) == (2, 2)
    old_id = SecretBox.from_settings(OLD_KEY).key_id
    sealed, _ = await stored(pg_pool, "alice")
    assert sealed is not None
    assert sealed.startswith(f"{SEALED_PREFIX}{old_id}:")
    assert (await routes_with(pg_pool, OLD_KEY).reseal()).resealed == 0  # idempotent

    moving = routes_with(pg_pool, NEW_KEY, previous=OLD_KEY)
    assert (await moving.reseal()).resealed == 2
    new_id = SecretBox.from_settings(NEW_KEY).key_id
    sealed, _ = await stored(pg_pool, "bob")
    assert sealed is not None
    assert sealed.startswith(f"{SEALED_PREFIX}{new_id}:")
    found = await routes_with(pg_pool, NEW_KEY).route("alice")
    assert found is not None
    assert found.secret == first.secret

    assert (await routes_with(pg_pool, None, previous=NEW_KEY).reseal()).resealed == 2
    assert (await stored(pg_pool, "alice"))[0] == first.secret


async def test_rekey_without_the_old_key_writes_nothing(pg_pool: Pool) -> None:
    """A rekey that cannot open a secret fails before writing anything."""
    await routes_with(pg_pool, OLD_KEY).add("alice", "http://127.0.0.1:9/a")
    before = await stored(pg_pool, "alice")
    with pytest.raises(SecretUnreadable):
        await routes_with(pg_pool, NEW_KEY).reseal()
    assert await stored(pg_pool, "alice") == before


@dataclass
class Recipient:
    """A real inbox on 127.0.0.1 that verifies with the secrets it was given."""

    inbox: Inbox | None = None
    url: str = ""
    outcomes: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Verify the delivery with this recipient's secrets; accept or refuse."""
        assert self.inbox is not None
        try:
            self.inbox.receive(request.headers, await request.read())
        except Exception as exc:  # the refusal is what the test looks at
            self.outcomes.append(type(exc).__name__)
            return web.json_response({"accepted": False}, status=401)
        self.outcomes.append("accepted")
        return web.json_response({"accepted": True})


@pytest.fixture
async def recipient() -> AsyncIterator[Recipient]:
    server = Recipient()
    async with posts_to(server.handle, "/hook") as server.url:
        yield server


async def test_rotation_signs_with_both_keys_until_the_overlap_ends(
    pg_pool: Pool, recipient: Recipient
) -> None:
    """After rotate, a recipient on either secret accepts; after the overlap only the new."""
    clock = FrozenClock()
    routes = routes_with(pg_pool, NEW_KEY, clock=clock)
    old = (await routes.add("alice", recipient.url)).secret
    rotated = await routes.rotate("alice", overlap_s=DAY_S)
    new = rotated.secret
    assert old is not None
    assert new is not None
    assert new != old
    _, previous = await stored(pg_pool, "alice")
    assert previous is not None
    assert previous.startswith(SEALED_PREFIX)

    async with HttpTransport(routes, clock=clock) as transport:
        for secret in (old, new):
            recipient.inbox = Inbox(secret, clock=clock)
            assert isinstance(
                await transport.post(make_reply(f"k:{secret[-4:]}", agent="alice")), Accepted
            )

        clock.advance(DAY_S + 1)
        recipient.inbox = Inbox(old, clock=clock)
        assert isinstance(await transport.post(make_reply("k:late-old", agent="alice")), Failed)
        recipient.inbox = Inbox([old, new], clock=clock)
        assert isinstance(await transport.post(make_reply("k:late-both", agent="alice")), Accepted)
    assert recipient.outcomes == ["accepted", "accepted", "InvalidSignature", "accepted"]

    assert await routes.forget_previous_secrets() == 1
    assert (await stored(pg_pool, "alice"))[1] is None
    assert await routes.forget_previous_secrets() == 0


async def test_rotation_without_overlap_and_of_unknown_routes(pg_pool: Pool) -> None:
    """An overlap of 0 stops the old secret at once; a mailbox or unknown agent cannot rotate."""
    clock = FrozenClock()
    routes = routes_with(pg_pool, None, clock=clock)
    await routes.add("alice", "http://127.0.0.1:9/a")
    rotated = await routes.rotate("alice", overlap_s=0)
    assert rotated.signing_secrets(clock.now()) == [rotated.secret]
    await routes.add("box", kind="mailbox")
    for agent in ("box", "nobody"):
        with pytest.raises(RouteNotFound):
            await routes.rotate(agent, overlap_s=60)


async def test_an_edit_that_could_not_be_read_back_changes_nothing(pg_pool: Pool) -> None:
    """Without the key, rotate and update are refused before they write a thing."""
    await routes_with(pg_pool, NEW_KEY).add("alice", "http://127.0.0.1:9/a")
    before = await stored(pg_pool, "alice")
    keyless = routes_with(pg_pool, None)
    with pytest.raises(SecretUnreadable):
        await keyless.rotate("alice", overlap_s=60)
    with pytest.raises(SecretUnreadable):
        await keyless.update("alice", url="http://127.0.0.1:9/b")
    assert await stored(pg_pool, "alice") == before
    assert (await keyless.hold("alice")).enabled is False  # a hold needs no secret
