"""Security at the command line: egress refusals as one-line errors, redacted route listings."""

from __future__ import annotations

import json

from tests.support.cli import cli


async def test_route_add_refuses_a_metadata_url_in_one_line(database_url: str) -> None:
    """Adding a route to a metadata address, in any spelling, fails with a one-line egress error."""
    for url in ["http://169.254.169.254/latest/meta-data/", "http://0xa9fea9fe/"]:
        done = await cli(database_url, "route", "add", "mallory", url)
        assert done.returncode != 0
        assert "egress policy" in done.stderr
        assert "Traceback" not in done.stderr
    listed = await cli(database_url, "route", "list", "--json")
    assert json.loads(listed.stdout) == []


async def test_public_egress_refuses_loopback_routes(database_url: str) -> None:
    """With BIRDDOG_EGRESS=public, a loopback route is refused; by default it is accepted."""
    url = "http://127.0.0.1:9/hook"
    refused = await cli(database_url, "route", "add", "local", url, BIRDDOG_EGRESS="public")
    assert refused.returncode != 0
    assert "not a public address" in refused.stderr
    accepted = await cli(database_url, "route", "add", "local", url)
    assert accepted.returncode == 0, accepted.stderr


async def test_route_listings_redact_the_query(database_url: str) -> None:
    """Adding, updating and listing routes never prints a route URL's query string."""
    url = "http://127.0.0.1:9/hook?sig=abc123&plain=visible-value"
    added = await cli(database_url, "route", "add", "q", url)
    assert added.returncode == 0, added.stderr
    updated = await cli(database_url, "route", "update", "q", "--url", url + "&more=1")
    listed = await cli(database_url, "route", "list")
    as_json = await cli(database_url, "route", "list", "--json")
    for shown in (added.stdout, updated.stdout, listed.stdout, as_json.stdout):
        assert "http://127.0.0.1:9/hook?[redacted]" in shown
        assert "visible-value" not in shown
        assert "abc123" not in shown


async def test_rotate_prints_a_new_secret_and_rekey_seals_every_secret(database_url: str) -> None:
    """Route rotate prints the new secret once; secrets rekey seals them; nothing else shows one."""
    added = await cli(database_url, "route", "add", "rot", "http://127.0.0.1:9/hook")
    old = added.stdout.split("signing secret: ")[1].strip()
    rotated = await cli(database_url, "route", "rotate", "rot", "--overlap", "2h")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.split("new signing secret: ")[1].split()[0]
    assert new.startswith("whsec_")
    assert new != old
    assert "both signatures until" in rotated.stdout

    key = (await cli(database_url, "secrets", "keygen")).stdout.strip()
    rekeyed = await cli(database_url, "secrets", "rekey", BIRDDOG_SECRET_KEY=key)
    assert rekeyed.returncode == 0, rekeyed.stderr
    assert "2 secret(s) of 1 route(s) rewritten; all sealed with key" in rekeyed.stdout
    keyless = await cli(database_url, "route", "rotate", "rot", "--overlap", "0")
    assert keyless.returncode != 0
    assert "BIRDDOG_SECRET_KEY" in keyless.stderr
    assert "Traceback" not in keyless.stderr
    for done in (rekeyed, keyless, await cli(database_url, "route", "list", "--json")):
        assert old not in done.stdout + done.stderr
        assert new not in done.stdout + done.stderr
