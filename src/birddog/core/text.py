r"""Outside text made printable: nothing it holds can drive a terminal, a log line or a page.

Text BirdDog did not write (a recipient's status line and body, a header value, an
error message, a key or id someone chose) may carry characters that act instead of
showing: C0 and C1 controls (ESC starts terminal sequences that clear the screen or set
the window title, BEL, backspace, CR that rewrites a line), DEL, bidirectional overrides
and isolates that reorder what is shown, line and paragraph separators, and invisible
format characters (zero-width spaces and joiners, Unicode tag characters, variation
selectors, fillers) that hide text. :func:`printable` writes each one as a visible escape
(``\x1b``, ``\u202e``, ``\U000e0041``), so what is shown is what is there.

Pure: the standard library only.
"""

from __future__ import annotations

import re
import unicodedata

_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls, format characters (bidi, zero-width, tags), surrogates, line separators."""

_INVISIBLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0000-\U000e0fff]"
)
"""Default-ignorable characters outside those categories: they show nothing, so they can
hide text (variation selectors, Hangul fillers, the combining grapheme joiner)."""

_CANDIDATE = re.compile(r"[^\x20-\x7e]")
"""Anything outside printable ASCII; each candidate is then judged by its category, so
the rule follows the running Python's Unicode tables rather than a copied list."""


def is_control(char: str) -> bool:
    """Whether one character controls display rather than showing itself.

    True for C0 and C1 controls and DEL, format characters (bidi overrides and
    isolates, zero-width characters, tags), lone surrogates and line or paragraph
    separators.

    Args:
        char: a single character.

    Returns:
        True when the character must not reach a terminal, log or page as is.
    """
    return unicodedata.category(char) in _CONTROL_CATEGORIES


def first_control(text: str) -> int | None:
    """The index of the first control character in the text (see :func:`is_control`).

    Args:
        text: the text to scan.

    Returns:
        The index of the first control character, or None when there is none.
    """
    if text.isascii() and text.isprintable():
        return None
    for match in _CANDIDATE.finditer(text):
        if is_control(match.group()):
            return match.start()
    return None


def escape_char(char: str) -> str:
    r"""The visible escape of one character: ``\x1b``, ``\u202e`` or ``\U000e0041``.

    Args:
        char: a single character.

    Returns:
        Its escape, as Python writes it in a string literal.
    """
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def printable(text: str) -> str:
    """Make outside text safe to print to a terminal, write to a log or put on a page.

    Every character that controls display or hides text (see :func:`is_control`, plus
    invisible default-ignorable characters such as variation selectors) is replaced by
    its visible escape; everything else, including other languages and emoji, is kept.
    The result is one line, since CR, LF and the Unicode line separators are escaped
    too. Escaping is not quoting: a backslash in the input stays a backslash. HTML
    escaping remains the template engine's job.

    Args:
        text: the outside text.

    Returns:
        The text with every such character escaped; the text itself when it has none.
    """
    if text.isascii() and text.isprintable():
        return text
    return _CANDIDATE.sub(_escape_match, text)


def _escape_match(match: re.Match[str]) -> str:
    char = match.group()
    if is_control(char) or _INVISIBLE.match(char):
        return escape_char(char)
    return char


SHOWN_KEY_MAX_LENGTH = 200
"""An error message echoes at most this many characters of a key or id it names."""


def shown_key(value: str) -> str:
    """A key or id as an error message echoes it: quoted, printable, at most 200 characters.

    A key may be 512 characters and a refused id longer still; the message stays one
    readable line, the cut marked with an ellipsis.

    Args:
        value: the key or id.

    Returns:
        ``'alice'``, or ``'aaa…'`` holding the first 200 characters of a longer one.
    """
    cut = value if len(value) <= SHOWN_KEY_MAX_LENGTH else value[:SHOWN_KEY_MAX_LENGTH] + "…"
    return repr(printable(cut))
