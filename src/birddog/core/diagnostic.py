"""Bounded diagnostics: one safe line that can travel in a reply or sit in a row."""

from __future__ import annotations

import re

DIAGNOSTIC_MAX_LENGTH = 200
"""A diagnostic is cut to this many characters after masking."""

REDACTED = "[redacted]"

_SCHEMES = r"(?:Bearer|Basic|Digest|Token|Negotiate|Bot|ApiKey)"
_AUTH_SCHEME = re.compile(rf"\b({_SCHEMES})\s+(?!\[redacted\])[^\s\"',;]+", re.IGNORECASE)
_NAMED_KEY = re.compile(
    r"""(?P<head>["']?\b[\w-]*?(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|"""
    r"""token|secret|password|passwd|pwd|credentials?|authorization|auth|cookie|session[_-]?id)"""
    r"""\b["']?\s*[:=]\s*["']?)"""
    rf"""(?!{_SCHEMES}\s)(?!\[redacted\])(?P<value>[^\s"',;&}}\]]+)""",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^@\s/]+@")
_LONG_RUN = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{23,}(?![\w-])")
_WHITESPACE = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def bounded_diagnostic(text: object) -> str:
    """Make a diagnostic safe to store and deliver.

    The result is one line, holds no credential-shaped value (authorization-scheme
    credentials such as ``Bearer x``, named keys, tokens, secrets and passwords such as
    ``api_key=x``, ``"token": "x"`` or ``password: x``, URL passwords, and long
    letter-and-digit runs), holds no NUL or lone surrogate, and is at most
    :data:`DIAGNOSTIC_MAX_LENGTH` characters. It never fails.

    Args:
        text: the raw diagnostic; anything that is not a string is formatted first.

    Returns:
        The bounded, masked diagnostic.
    """
    value = text if isinstance(text, str) else _safe_str(text)
    value = _SURROGATE.sub("\ufffd", value.replace("\x00", " "))
    value = _WHITESPACE.sub(" ", value).strip()
    value = _URL_PASSWORD.sub(rf"\1{REDACTED}@", value)
    value = _AUTH_SCHEME.sub(rf"\1 {REDACTED}", value)
    value = _NAMED_KEY.sub(rf"\g<head>{REDACTED}", value)
    value = _LONG_RUN.sub(REDACTED, value)
    return value[:DIAGNOSTIC_MAX_LENGTH]


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
