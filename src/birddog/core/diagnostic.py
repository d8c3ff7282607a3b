"""Bounded diagnostics: one safe line that can travel in a reply or sit in a row.

A diagnostic often quotes what someone else said (a recipient's answer, a library's
error), so it is treated as hostile: it is folded to one line, its control characters
are escaped (:func:`birddog.core.text.inert`), credential-shaped values are masked, and
it is cut to :data:`DIAGNOSTIC_MAX_LENGTH` characters.

The masks, in order (each leaves ``[redacted]`` where the value was):

- PEM blocks (``-----BEGIN ... PRIVATE KEY-----`` and everything up to its END line);
- passwords in URLs (``scheme://user:password@host``);
- signed or secret query parameters (``?sig=``, ``X-Amz-Signature=``, ``token=``,
  ``code=`` and any parameter named like a key, secret, credential or session);
- authorization-scheme credentials (``Bearer x``, ``Basic x``);
- named keys, tokens, secrets and passwords (``api_key=x``, ``"token": "x"``,
  ``password: "my secret pass"``; a quoted value is masked whole, spaces included);
- well-known token shapes (AWS access key ids, JWTs, GitHub, GitLab, Slack, Stripe,
  OpenAI, Anthropic, Google, Hugging Face, npm and PyPI tokens, ``whsec_`` secrets);
- long base64 runs mixing upper case, lower case and digits (AWS secret keys);
- long letter-and-digit runs (24 characters or more).
"""

from __future__ import annotations

import re

from birddog.core.text import inert

DIAGNOSTIC_MAX_LENGTH = 200
"""A diagnostic is cut to this many characters after masking."""

REDACTED = "[redacted]"

_SCAN_LIMIT = 4096
"""Only this much of the folded text is masked and kept (the result shows 200 characters);
it bounds the work on a hostile megabyte. The word the limit cuts through is dropped, so
no part of a value escapes its mask."""

_NOT_REDACTED = r"(?!\[redacted\])"
_SCHEMES = r"(?:Bearer|Basic|Digest|Token|Negotiate|Bot|ApiKey)"

_PEM = re.compile(r"(-----BEGIN [A-Z0-9 ]{1,64}-----).*?(?:-----END [A-Z0-9 ]{1,64}-----|$)")
_URL_PASSWORD = re.compile(rf"(://[^/\s:@]*:){_NOT_REDACTED}[^\s/?#]*@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:[\w.~%-]*?(?:sig|token|key|secret|pass|pwd|credential|auth|code|"
    r"session|policy|jwt|assertion|otp)[\w.~%-]*)=)"
    rf"{_NOT_REDACTED}(?P<value>[^&#\s\"'<>]+)",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(rf"\b({_SCHEMES})\s+{_NOT_REDACTED}[^\s\"',;]+", re.IGNORECASE)
_NAMED_KEY = re.compile(
    r"""(?P<head>(?<![\w-])[\w-]*?(?:api[_-]?key|access[_-]?key|secret[_-]?key|"""
    r"""private[_-]?key|token|secret|password|passwd|pwd|credentials?|authorization|auth|"""
    r"""cookie|session[_-]?id|signature)(?![\w-])(?:\\?["'])?\s*[:=]\s*)"""
    rf"""(?!{_SCHEMES}\s){_NOT_REDACTED}"""
    r"""(?P<value>\\"(?:(?!\\").)*+(?:\\"|$)"""  # a quoted value inside JSON inside a string
    r"""|"(?:\\.|[^"\\])*+(?:"|\\?$)"""  # a double-quoted value, spaces and all
    r"""|'(?:\\.|[^'\\])*+(?:'|\\?$)"""  # a single-quoted value
    r"""|[^\s"',;&}\]]+)""",  # an unquoted value, up to a delimiter
    re.IGNORECASE,
)
_TOKEN_PREFIXES = (
    r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{12,}",
    r"eyJ[\w-]{6,}(?:\.[\w-]*){0,2}",  # a JWT: base64url of '{"' then its other parts
    r"gh[pousr]_[A-Za-z0-9_]{20,}|github_pat_\w{20,}",
    r"gl(?:pat|dt|rt|ptt|soat|ft|imt|agent|oas)-[\w-]{16,}|GR1348941[\w-]{16,}",
    r"xox[abposre]-[\w-]{8,}|xapp-[\w-]{8,}",
    r"(?:sk|rk|pk)_(?:live|test)_\w{8,}|whsec_[A-Za-z0-9+/=]{8,}",
    r"sk-ant-[\w-]{16,}|sk-(?:proj|svcacct|admin)-[\w-]{16,}|sk-[A-Za-z0-9_-]{20,}",
    r"AIza[\w-]{30,}|hf_[A-Za-z0-9]{20,}|npm_[A-Za-z0-9]{20,}|pypi-[\w-]{20,}",
)
_TOKEN = re.compile(rf"(?<![\w-])(?:{'|'.join(_TOKEN_PREFIXES)})[\w.+/=-]*")
_BASE64_RUN = re.compile(
    # Not after a dot or colon and not from a slash, so host names and paths are kept.
    r"(?<![\w+/=.:-])(?=[\w+/=-]*[A-Z])(?=[\w+/=-]*[a-z])(?=[\w+/=-]*\d)"
    r"[\w+-][\w+/-]{31,}=*(?![\w+/=-])"
)
_AWS_SECRET = re.compile(
    # An AWS secret access key: exactly 40 base64 characters, which may begin with a slash
    # (the base64 rule above keeps runs that start with one, since paths do).
    r"(?<![\w+/=.:-])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*\d)"
    r"[A-Za-z0-9+/]{40}(?![\w+/=-])"
)
_LONG_RUN = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{23,}(?![\w-])")
_WHITESPACE = re.compile(r"\s+")


def bounded_diagnostic(text: object) -> str:
    """Make a diagnostic safe to store, deliver and print.

    The result is one line, holds no credential-shaped value (see the module docstring
    for the masks), holds no control character (each is escaped visibly, as
    :func:`birddog.core.text.inert` does), and is at most :data:`DIAGNOSTIC_MAX_LENGTH`
    characters. It never fails.

    Args:
        text: the raw diagnostic; anything that is not a string is formatted first.

    Returns:
        The bounded, masked diagnostic.
    """
    value = text if isinstance(text, str) else _safe_str(text)
    value = _WHITESPACE.sub(" ", value).strip()
    if len(value) > _SCAN_LIMIT:
        value = value[:_SCAN_LIMIT].rpartition(" ")[0]
    value = inert(value)
    value = _PEM.sub(rf"\1 {REDACTED}", value)
    value = _URL_PASSWORD.sub(rf"\1{REDACTED}@", value)
    value = _QUERY_SECRET.sub(rf"\g<head>{REDACTED}", value)
    value = _AUTH_SCHEME.sub(rf"\1 {REDACTED}", value)
    value = _NAMED_KEY.sub(_mask_named_value, value)
    value = _TOKEN.sub(REDACTED, value)
    value = _BASE64_RUN.sub(REDACTED, value)
    value = _AWS_SECRET.sub(REDACTED, value)
    value = _LONG_RUN.sub(REDACTED, value)
    return value[:DIAGNOSTIC_MAX_LENGTH]


def _mask_named_value(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), "")
    return f"{match.group('head')}{quote}{REDACTED}{quote}"


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
