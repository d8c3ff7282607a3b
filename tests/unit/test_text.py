"""printable: outside text shown as it is, every control or hiding character escaped visibly."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from birddog.core.text import escape_char, first_control, is_control, printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain ascii, kept as is", "plain ascii, kept as is"),
        ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),
        ("title\x1b]0;owned\x07", "title\\x1b]0;owned\\x07"),
        ("line\r\nnext\ttab", "line\\x0d\\x0anext\\x09tab"),
        ("del\x7f csi\x9b nel\x85", "del\\x7f csi\\x9b nel\\x85"),
        ("rlo\u202eisolate\u2067pop\u2069", "rlo\\u202eisolate\\u2067pop\\u2069"),
        ("zw\u200b\u200c\u200d\u2060\ufeff", "zw\\u200b\\u200c\\u200d\\u2060\\ufeff"),
        ("sep\u2028\u2029", "sep\\u2028\\u2029"),
        ("tags\U000e0001\U000e0068\U000e007f", "tags\\U000e0001\\U000e0068\\U000e007f"),
        ("vs\ufe0f\U000e0100 filler\u3164", "vs\\ufe0f\\U000e0100 filler\\u3164"),
        ("lone\ud800", "lone\\ud800"),
        ("日本語 Ελληνικά עברית 😀 back\\slash", "日本語 Ελληνικά עברית 😀 back\\slash"),
    ],
)
def test_inert_escapes_what_acts_and_keeps_what_shows(raw: str, shown: str) -> None:
    """Controls, bidi, separators, zero-width, tags and fillers are escaped; other text is kept."""
    assert printable(raw) == shown


def test_every_control_format_and_separator_character_is_escaped() -> None:
    """Every code point in Cc, Cf, Cs, Zl or Zp (by this Python's tables) comes out escaped."""
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"}:
            assert printable(char) == escape_char(char), hex(point)


@given(st.text())
def test_inert_output_has_no_control_character(text: str) -> None:
    """Whatever the input, the output holds no control, format or separator character."""
    out = printable(text)
    assert first_control(out) is None
    assert printable(out) == out


_VISIBLE = st.characters(
    exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Cn", "Mn"),
    exclude_characters="\u115f\u1160\u3164\uffa0",  # Hangul fillers: letters that show nothing
)


@given(st.text(alphabet=_VISIBLE))
def test_inert_keeps_printable_text(text: str) -> None:
    """Text without control or invisible characters is returned unchanged."""
    assert printable(text) == text


@given(st.text())
def test_first_control_agrees_with_is_control(text: str) -> None:
    """first_control finds exactly the first character is_control flags."""
    expected = next((i for i, c in enumerate(text) if is_control(c)), None)
    assert first_control(text) == expected


def test_escapes_use_the_shortest_python_form() -> None:
    """Escapes read like Python literals: two, four or eight hex digits by code point size."""
    assert escape_char("\x1b") == "\\x1b"
    assert escape_char("\u202e") == "\\u202e"
    assert escape_char("\U000e0041") == "\\U000e0041"
