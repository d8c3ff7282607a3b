"""bounded_diagnostic: one line, masked credentials, at most 200 characters, never fails."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog import DIAGNOSTIC_MAX_LENGTH, bounded_diagnostic


def test_max_length_is_200() -> None:
    """The limit is the spec's 200 characters."""
    assert DIAGNOSTIC_MAX_LENGTH == 200


def test_spec_example() -> None:
    """The spec's example diagnostic comes out exactly as documented."""
    assert (
        bounded_diagnostic("provider_error: 401 Authorization: Bearer sk-live-abc.def")
        == "provider_error: 401 Authorization: Bearer [redacted]"
    )


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("Authorization: Bearer abc.def-ghi", "abc.def-ghi"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("call failed api_key=k-123 status=500", "k-123"),
        ("x-api-key: abc999", "abc999"),
        ('{"token": "tok-1", "ok": false}', "tok-1"),
        ('{"access_token":"at-1"}', "at-1"),
        ("client_secret=shh", "shh"),
        ("secret: hush", "hush"),
        ("password: hunter2", "hunter2"),
        ("PASSWORD=Hunter2", "Hunter2"),
        ("db at postgres://app:pw-9@db.local/x down", "pw-9"),
        ("key sk_live_0123456789abcdefGHIJKLMNOP end", "sk_live_0123456789abcdefGHIJKLMNOP"),
        ("sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "9f86d0818"),
    ],
)
def test_credential_shaped_values_are_masked(raw: str, secret: str) -> None:
    """Authorization schemes, named keys, tokens, secrets, passwords and long runs are masked."""
    out = bounded_diagnostic(raw)
    assert secret not in out
    assert "[redacted]" in out


def test_ordinary_words_survive() -> None:
    """Plain prose, status codes and long words without digits are kept."""
    text = "upstream timeout after 30 s (HTTP 504); internationalization ok"
    assert bounded_diagnostic(text) == text


def test_one_line_with_whitespace_folded() -> None:
    """Newlines, tabs and runs of spaces fold into single spaces; ends are trimmed."""
    assert bounded_diagnostic("  Traceback:\n\tline 1\r\n  line 2  ") == "Traceback: line 1 line 2"


def test_cut_to_200_characters() -> None:
    """A long diagnostic is cut to exactly 200 characters."""
    out = bounded_diagnostic("word " * 100)
    assert len(out) == DIAGNOSTIC_MAX_LENGTH


def test_masks_before_cutting() -> None:
    """A credential straddling the cut is masked, not half-kept."""
    text = "x " * 95 + "password=abcdefghijklmnop"
    assert "abcdef" not in bounded_diagnostic(text)


def test_nul_and_surrogates_become_storable() -> None:
    """NUL characters and lone surrogates never reach storage."""
    out = bounded_diagnostic("a\x00b\ud800c")
    assert "\x00" not in out
    out.encode("utf-8")


def test_non_strings_are_formatted() -> None:
    """An exception or any object is formatted rather than refused."""
    assert bounded_diagnostic(ValueError("boom")) == "boom"
    assert bounded_diagnostic(42) == "42"


@given(st.text())
def test_never_fails_and_stays_bounded(text: str) -> None:
    """Any string gives one storable line of at most 200 characters."""
    out = bounded_diagnostic(text)
    assert len(out) <= DIAGNOSTIC_MAX_LENGTH
    assert "\n" not in out
    assert "\r" not in out
    assert "\x00" not in out
    out.encode("utf-8")


@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1))
def test_named_password_value_never_survives(value: str) -> None:
    """Whatever follows "password=" (up to a delimiter) is never kept verbatim."""
    clean = value.split(maxsplit=1)[0].strip("\"',;&}]")
    out = bounded_diagnostic(f"password={clean}")
    if clean and clean not in {"[redacted]"}:
        assert out.endswith("[redacted]") or clean not in out[len("password=") :]
