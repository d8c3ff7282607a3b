r"""Bounded diagnostics: one safe line that can travel in a reply or sit in a row.

A diagnostic often quotes what someone else said (a recipient's answer, a library's
error), so it is treated as hostile: it is folded to one line, its control characters
are escaped (:func:`birddog.core.text.printable`), credential-shaped values are masked, and
it is cut to :data:`DIAGNOSTIC_MAX_LENGTH` characters.

The masks, in order (each leaves ``[redacted]`` where the value was):

- PEM blocks (``-----BEGIN ... PRIVATE KEY-----`` and everything up to its END line);
- passwords in URLs (``scheme://user:password@host``), whatever characters the password
  holds (a slash, an ``@``, a ``?``): everything up to the userinfo's last ``@``;
- signed or secret query and fragment parameters (``?sig=``, ``X-Amz-Signature=``,
  ``#access_token=``, ``code=`` and any parameter named like a key, secret, credential
  or session);
- ``Authorization:`` headers, whatever the scheme (``Bearer x``, ``Basic x``,
  ``Custom x``), and authorization-scheme credentials anywhere (``Bearer x``);
- credentials on command lines: ``curl -u user:x`` (``--user``, ``-U``, ``--auth``),
  ``mysql -px``, ``sshpass -p x``, ``redis-cli -a x``, ``docker login -p x``, and options
  named like a secret followed by their value (``--password x``, ``--api-key x``,
  ``-storepass x``, ``-passin pass:x``);
- XML elements named like a secret (``<password>x</password>``, escaped ``&lt;`` too);
- named keys, tokens, secrets and passwords (``api_key=x``, ``"token": "x"``,
  ``password: "my secret pass"``, ``pass=x``, ``pw=x``, ``passphrase: x``, env dumps
  such as ``FOO_TOKEN=x``; a quoted value is masked whole, spaces included, also when
  the quotes are JSON-escaped);
- well-known token shapes (AWS access key ids, JWTs, GitHub, GitLab, Slack tokens and
  webhook URLs, Stripe, OpenAI, Anthropic, Google API keys, OAuth tokens and client
  secrets, Hugging Face, npm and PyPI tokens, ``whsec_`` secrets);
- long base64 runs mixing upper case, lower case and digits (AWS secret keys);
- long letter-and-digit runs (24 characters or more).

A credential may also arrive URL-encoded (``password%3Dhunter2``) or JSON-escaped
(``\u003cpassword\u003e``): the masks run again on the decoded text, and when they find
something there the decoded, masked text is what is kept.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from birddog.core.text import printable

DIAGNOSTIC_MAX_LENGTH = 200
"""A diagnostic is cut to this many characters after masking."""

REDACTED = "[redacted]"

_SCAN_LIMIT = 4096
"""Only this much of the folded text is masked and kept (the result shows 200 characters);
it bounds the work on a hostile megabyte. The word the limit cuts through is dropped, so
no part of a value escapes its mask."""

_NOT_REDACTED = r"(?!\[redacted\])"
_SCHEMES = r"(?:Bearer|Basic|Digest|Token|Negotiate|Bot|ApiKey)"

_MASKED_NAMES = (
    r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|account[_-]?key|"
    r"token|secret|password|passwd|passphrase|passcode|pwd|credentials?|authorization|auth|"
    r"cookie|session[_-]?id|signature|webhook[_-]?url"
)
"""What names a secret, as all or the end of a longer name (``db_password``, ``FOO_TOKEN``)."""

_SECRET_NAME = rf"(?:[\w-]*?(?:{_MASKED_NAMES})|(?:[\w-]*[_-])?(?:pass|pw))(?![\w-])"
"""A name ending in a secret word; ``pass`` and ``pw`` alone or after ``_``/``-`` only
(``db_pass``, not ``bypass``)."""

_VALUE = (
    r"(?P<value>\\+\"(?:(?!\\+\").)*+(?:\\+\"|$)"  # JSON-escaped double quotes, any depth
    r"|\\+'(?:(?!\\+').)*+(?:\\+'|$)"  # escaped single quotes
    r'|"(?:\\.|[^"\\])*+(?:"|\\?$)'  # a double-quoted value, spaces and all
    r"|'(?:\\.|[^'\\])*+(?:'|\\?$)"  # a single-quoted value
    r"""|(?:\\(?!["'])|[^\s"',;&}\]\\])+)"""  # an unquoted value, up to a delimiter
)
"""A value after its name: quoted (masked whole, spaces included) or up to a delimiter."""

_PEM = re.compile(r"(-----BEGIN [A-Z0-9 ]{1,64}-----).*?(?:-----END [A-Z0-9 ]{1,64}-----|$)")
_URL_PASSWORD = re.compile(
    # scheme://user:password@ (JSON may escape the slashes). The password runs to the last
    # '@' before a space, so a '/', '@' or '?' in it cannot end the mask early (a path
    # holding an '@' after host:port is masked too: better too much than a password).
    rf"(:\\?/\\?/[^/\s:]*:){_NOT_REDACTED}\S*@"
)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;#](?:[\w.~%-]*?(?:sig|token|key|secret|pass|pwd|credential|auth|code|"
    r"session|policy|jwt|assertion|otp)[\w.~%-]*)=)"
    rf"{_NOT_REDACTED}{_VALUE}",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    # Authorization: <any scheme> <credential>; the credential goes, the scheme stays.
    # A scheme word inside the header's own quotes needs a credential before the closing
    # quote ("A " is one quoted value, masked whole, not the scheme A and a lone quote).
    r"""(?P<head>(?<![\w-])(?:proxy-)?authorization\\*["']?\s*[:=]\s*\\*(?P<hq>["'])?"""
    r"""(?![A-Za-z][\w.-]*\s+\[redacted\])(?:[A-Za-z][\w.-]*\s+(?=\S)(?!(?P=hq)))?)"""
    rf"""{_NOT_REDACTED}{_VALUE}""",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(rf"\b({_SCHEMES})\s+{_NOT_REDACTED}[^\s\"',;]+", re.IGNORECASE)
_USER_PASSWORD_OPTION = re.compile(
    # curl -u user:password, --user=user:password, --proxy-user, httpie's -a/--auth.
    r"""(?P<head>(?<!\S)(?:-u|--user|-U|--proxy-user|-a|--auth)(?:\s+|=)?(?P<q>\\*["'])?"""
    r"""(?!\d+:\d+(?:["'\s]|$))[^\s:"'\\]+:)"""  # uid:gid (docker -u 1000:1000) is no password
    rf"""{_NOT_REDACTED}(?P<value>(?(q)(?:(?!(?P=q)).)*|\S+))"""
)
_SECRET_OPTION = re.compile(
    # --password VALUE, --api-key VALUE, -storepass VALUE, -passin pass:VALUE
    rf"""(?P<head>(?<![\w-])--?(?:{_SECRET_NAME}|(?:store|key|src|dest|new)pass(?:word)?|"""
    r"""pass(?:in|out))(?![\w-])\s+)(?!-)"""
    rf"""{_NOT_REDACTED}{_VALUE}""",
    re.IGNORECASE,
)
_COMMAND = re.compile(
    # Commands whose password option is a letter: mysql -pVALUE (attached), sshpass -p,
    # redis-cli -a, docker login -p; their arguments run to a shell separator.
    r"(?<![\w-])(?P<command>mysql\w*|mariadb[\w-]*|mycli|sshpass|redis-cli|"
    r"(?:docker|podman|buildah|skopeo|nerdctl)\s+login)(?![\w-])(?P<args>[^|;&]*)",
    re.IGNORECASE,
)
_COMMAND_OPTIONS = {
    "mysql": re.compile(rf"(?P<head>(?<!\S)-p(?=\S)){_NOT_REDACTED}{_VALUE}"),
    "sshpass": re.compile(rf"(?P<head>(?<!\S)-p\s*){_NOT_REDACTED}{_VALUE}"),
    "redis-cli": re.compile(rf"(?P<head>(?<!\S)-a\s*){_NOT_REDACTED}{_VALUE}"),
    "login": re.compile(rf"(?P<head>(?<!\S)-p\s*){_NOT_REDACTED}{_VALUE}"),
}
_XML_SECRET = re.compile(
    rf"(?P<head><(?P<tag>[\w:.-]*?(?:{_MASKED_NAMES}|pass|pw))(?:\s[^<>]*)?>)"
    rf"{_NOT_REDACTED}(?P<value>[^<]+)(?=<\\?/(?P=tag)>|$)"
    rf"|(?P<ehead>&lt;(?P<etag>[\w:.-]*?(?:{_MASKED_NAMES}|pass|pw))&gt;)"
    rf"{_NOT_REDACTED}(?P<evalue>(?:(?!&lt;).)+)(?=&lt;/(?P=etag)&gt;|$)",
    re.IGNORECASE,
)
_NAMED_KEY = re.compile(
    rf"""(?P<head>(?<![\w-]){_SECRET_NAME}(?:\\*["'])?\s*(?:=>|:=|[:=])\s*)"""
    # A scheme word before a masked credential (Authorization: Custom [redacted]) stays.
    rf"""(?!{_SCHEMES}\s)(?![\w.-]+\s+\[redacted\]){_NOT_REDACTED}{_VALUE}""",
    re.IGNORECASE,
)
_KEY_NAME = re.compile(_SECRET_NAME, re.IGNORECASE)
_KEY_SEPARATOR = re.compile(r"\s*(?:=>|:=|[:=])")
_TOKEN_PREFIXES = (
    r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{12,}",
    r"eyJ[\w-]{6,}(?:\.[\w-]*){0,2}",  # a JWT: base64url of '{"' then its other parts
    r"gh[pousr]_[A-Za-z0-9_]{20,}|github_pat_\w{20,}",
    r"gl(?:pat|dt|rt|ptt|soat|ft|imt|agent|oas)-[\w-]{16,}|GR1348941[\w-]{16,}",
    r"xox[abposre]-[\w-]{8,}|xapp-[\w-]{8,}",
    r"(?:sk|rk|pk)_(?:live|test)_\w{8,}|whsec_[A-Za-z0-9+/=]{8,}",
    r"sk-ant-[\w-]{16,}|sk-(?:proj|svcacct|admin)-[\w-]{16,}|sk-[A-Za-z0-9_-]{20,}",
    r"AIza[\w-]{30,}|hf_[A-Za-z0-9]{20,}|npm_[A-Za-z0-9]{20,}|pypi-[\w-]{20,}",
    r"ya29\.[\w-]{16,}|1//0[\w-]{20,}|GOCSPX-[\w-]{16,}",  # Google OAuth tokens, secrets
)
_TOKEN = re.compile(rf"(?<![\w-])(?:{'|'.join(_TOKEN_PREFIXES)})[\w.+/=-]*")
_WEBHOOK_URL = re.compile(
    # A webhook URL is its own credential: whoever has it may post.
    r"(?P<head>https?:\\?/\\?/(?:hooks\.slack\.com\\?/(?:services|workflows|triggers)|"
    r"discord(?:app)?\.com\\?/api\\?/webhooks|[\w.-]*webhook\.office\.com\\?/webhookb2)"
    r"\\?/)[^\s\"'<>]+",
    re.IGNORECASE,
)
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
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_JSON_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|([\"\\/'bfnrt]))")
_JSON_CHARS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_OPENING_QUOTE = re.compile(r"\\*[\"']")


def bounded_diagnostic(text: object) -> str:
    """Make a diagnostic safe to store, deliver and print.

    The result is one line, holds no credential-shaped value (see the module docstring
    for the masks), holds no control character (each is escaped visibly, as
    :func:`birddog.core.text.printable` does), and is at most :data:`DIAGNOSTIC_MAX_LENGTH`
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
    value = _masked(printable(value))
    for _ in range(2):  # a value encoded twice (%2522) is seen through on the second round
        decoded = [view for view in (_percent_decoded(value), _json_unescaped(value)) if view]
        found = [again for view in decoded if (again := _masked(view)) != view]
        if not found:
            break
        value = found[0]
    return value[:DIAGNOSTIC_MAX_LENGTH]


def _masked(value: str) -> str:
    """Every mask of the module docstring, in order, over one line of printable text."""
    value = _PEM.sub(rf"\1 {REDACTED}", value)
    value = _WEBHOOK_URL.sub(rf"\g<head>{REDACTED}", value)
    value = _URL_PASSWORD.sub(rf"\1{REDACTED}@", value)
    value = _QUERY_SECRET.sub(_mask_named_value, value)
    value = _AUTH_HEADER.sub(_mask_named_value, value)
    value = _AUTH_SCHEME.sub(rf"\1 {REDACTED}", value)
    value = _USER_PASSWORD_OPTION.sub(_mask_quoted_value, value)
    value = _COMMAND.sub(_mask_command, value)
    value = _SECRET_OPTION.sub(_mask_option_value, value)
    value = _XML_SECRET.sub(_mask_xml, value)
    value = _NAMED_KEY.sub(_mask_named_value, value)
    value = _TOKEN.sub(REDACTED, value)
    value = _BASE64_RUN.sub(REDACTED, value)
    value = _AWS_SECRET.sub(REDACTED, value)
    return _LONG_RUN.sub(REDACTED, value)


def _one_line(text: str) -> str:
    return printable(_WHITESPACE.sub(" ", text).strip())


def _percent_decoded(value: str) -> str | None:
    """The text URL-decoded, as one printable line; None when it holds no escape."""
    if not _PERCENT.search(value):
        return None
    return _one_line(unquote(value))


def _json_unescaped(value: str) -> str | None:
    """The text with one level of JSON string escapes undone; None when it holds none."""
    if "\\" not in value:
        return None

    def char(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _JSON_CHARS.get(match.group(2), match.group(2))

    decoded = _JSON_ESCAPE.sub(char, value)
    return None if decoded == value else _one_line(decoded)


def _mask_command(match: re.Match[str]) -> str:
    command = match.group("command").lower()
    kind = next(
        (name for name in ("sshpass", "redis-cli") if command == name),
        "login" if command.endswith("login") else "mysql",
    )
    args = _COMMAND_OPTIONS[kind].sub(_mask_named_value, match.group("args"))
    return f"{match.group('command')}{args}"


def _mask_xml(match: re.Match[str]) -> str:
    if match.group("head") is not None:
        return f"{match.group('head')}{REDACTED}"
    return f"{match.group('ehead')}{REDACTED}"


def _mask_quoted_value(match: re.Match[str]) -> str:
    # A quoted value stops before its closing quote, which stays in the text.
    return f"{match.group('head')}{REDACTED}"


def _mask_named_value(match: re.Match[str]) -> str:
    value = match.group("value")
    opening = _OPENING_QUOTE.match(value)
    quote = opening.group() if opening else ""
    return f"{match.group('head')}{quote}{REDACTED}{quote}"


def _mask_option_value(match: re.Match[str]) -> str:
    # An option's "value" that is a secret key's name with its value after it
    # (-SECRET "pass": "...") is the key's: left for _NAMED_KEY, which masks what follows.
    name = match.group("value").strip("\\\"'")
    if _KEY_NAME.fullmatch(name) and _KEY_SEPARATOR.match(match.string, match.end()):
        return match.group()
    return _mask_named_value(match)


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
