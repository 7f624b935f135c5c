"""Redaction: secrets never leave the process that first reads them.

Applied before anything is written (database, rejected-record store, reports):

* **Headers** — ``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``,
  ``X-Api-Key``, ``Api-Key`` and any configured name are removed from captured requests;
  the record's :class:`~shadoweval.records.RedactionReport` lists the names removed
  (never the values).
* **Secret-key patterns** in free text (a line that could not be decoded, an error message):
  bearer tokens, OpenAI/Anthropic-style ``sk-`` keys, AWS access key ids, GitHub and Slack
  tokens, and the value of any JSON header pair with a sensitive name are replaced by
  ``[REDACTED:<rule>]``.
* **URL credentials** — ``https://user:password@host`` loses its ``user:password@``.
* **Query parameters** with a credential-like name (:func:`sensitive_name`: ``token``,
  ``access_token``, ``api_key``, ``key``, ``sig`` … or a name holding such a word) keep
  their name and lose their value in a logged request target
  (:func:`redact_request_target`: the API's access log); the capture sidecar applies the
  same names to what it records.

The capture sidecar applies these rules, plus body rules, before it produces; the replay
runner applies the header rules again when it reads a capture log (defence in depth: a log
written by hand or by another tool may carry credentials).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from shadoweval.records import Exchange, HeaderPair, RedactionHit, RedactionReport

SENSITIVE_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
"""Header names (lower case) that are always removed before a write."""


@dataclass(frozen=True, slots=True)
class SecretRule:
    """A named pattern whose matches are replaced by ``[REDACTED:<name>]``."""

    name: str
    pattern: re.Pattern[str]
    group: int = 0


_HEADER_NAMES = "|".join(sorted(re.escape(h) for h in SENSITIVE_HEADERS))

SECRET_RULES: tuple[SecretRule, ...] = (
    # {"name": "authorization", "value": "..."} as records store headers
    SecretRule(
        "sensitive_header",
        re.compile(
            rf'"name"\s*:\s*"(?:{_HEADER_NAMES})"\s*,\s*"value"\s*:\s*"((?:[^"\\]|\\.)*)"',
            re.IGNORECASE,
        ),
        group=1,
    ),
    # "Authorization": "..." / "x-api-key": "..." as a plain JSON object or header dump
    SecretRule(
        "sensitive_header",
        re.compile(rf'"(?:{_HEADER_NAMES})"\s*:\s*"((?:[^"\\]|\\.)*)"', re.IGNORECASE),
        group=1,
    ),
    SecretRule("bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"), group=1),
    SecretRule("api_key", re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{12,}")),
    SecretRule("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    SecretRule("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    SecretRule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    # Stripe secret / restricted / publishable keys (sk_live_…, rk_test_…, pk_live_…)
    SecretRule("stripe_key", re.compile(r"\b[srp]k_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    # Google API keys: "AIza" + 35 characters
    SecretRule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")),
    # Hugging Face user access tokens
    SecretRule("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    # GitLab personal access tokens
    SecretRule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])")),
)
"""Default secret-key rules for free text, applied in order."""


SENSITIVE_NAME_WORDS: frozenset[str] = frozenset(
    {
        "auth",
        "authorization",
        "authentication",
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "pass",
        "apikey",
        "key",
        "cookie",
        "credential",
        "credentials",
        "cred",
        "creds",
        "signature",
        "sig",
        "session",
        "bearer",
        "jwt",
        "pwd",
        "csrf",
        "xsrf",
    }
)
"""Words (of a header or query-parameter name split on ``-``/``_``/``.`` and at camelCase
humps) that mark it sensitive."""

SENSITIVE_NAME_ENDINGS: tuple[str, ...] = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "credential",
    "credentials",
    "cookie",
    "session",
    "sessionid",
    "signature",
)
"""A word ending so is sensitive too (``x-mytoken``, ``x-csrftoken``, ``clientsecret``);
``tokens`` does not end so (``x-ratelimit-remaining-tokens`` is kept)."""

SENSITIVE_NAME_STARTS: tuple[str, ...] = ("auth", "passw", "secret", "credential", "csrf", "xsrf")
"""A word starting so is sensitive too (``authentication``, ``passwordhash``)."""

SENSITIVE_QUERY_PARAMS: frozenset[str] = frozenset(
    {"key", "api_key", "api-key", "apikey", "token", "access_token", "sig", "signature", "code"}
)
"""Query-parameter names always redacted (besides any name with a sensitive word)."""

_NAME_SPLIT = re.compile(r"[-_.]")
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def sensitive_name(name: str) -> bool:
    """Whether a header or query-parameter name suggests a credential or session id.

    The name is split on ``-``, ``_``, ``.`` and camelCase humps (``accessToken`` →
    ``access``, ``token``) and lower-cased; it is sensitive when it is one of
    :data:`SENSITIVE_QUERY_PARAMS`, or a word is one of :data:`SENSITIVE_NAME_WORDS`,
    ends with one of :data:`SENSITIVE_NAME_ENDINGS` or starts with one of
    :data:`SENSITIVE_NAME_STARTS`.
    """
    lowered = name.lower()
    if lowered in SENSITIVE_QUERY_PARAMS:
        return True
    for word in _NAME_SPLIT.split(_CAMEL_HUMP.sub("_", name).lower()):
        if (
            word in SENSITIVE_NAME_WORDS
            or word.endswith(SENSITIVE_NAME_ENDINGS)
            or word.startswith(SENSITIVE_NAME_STARTS)
        ):
            return True
    return False


QUERY_VALUE_REDACTED = "[REDACTED]"
"""What a credential-like query parameter's value becomes in a logged request target."""


def redact_query_string(query: str) -> str:
    """``query`` (without its ``?``) with the values of credential-like parameters
    (:func:`sensitive_name`) replaced by :data:`QUERY_VALUE_REDACTED`; every other byte,
    order and encoding kept. Secret-looking values under other names (``sk-…``, bearer
    tokens: :data:`SECRET_RULES`) are replaced too."""
    if not query:
        return query
    parts: list[str] = []
    for item in query.split("&"):
        name, sep, value = item.partition("=")
        if sep and value and sensitive_name(unquote_plus(name)):
            parts.append(f"{name}={QUERY_VALUE_REDACTED}")
        elif sep and value:
            _, hits = scrub_secrets(unquote_plus(value))
            parts.append(f"{name}={QUERY_VALUE_REDACTED}" if hits else item)
        else:
            parts.append(item)
    return "&".join(parts)


def redact_request_target(target: str) -> str:
    """A request target (``/path?query``) fit for a log line: the query through
    :func:`redact_query_string`, secret-looking text in the path (:data:`SECRET_RULES`)
    replaced."""
    path, sep, query = target.partition("?")
    path = scrub_secrets(path)[0]
    return f"{path}{sep}{redact_query_string(query)}" if sep else path


def scrub_secrets(
    text: str, rules: Iterable[SecretRule] = SECRET_RULES
) -> tuple[str, tuple[RedactionHit, ...]]:
    """Replace secret-looking substrings of ``text``; return the text and what fired.

    Each hit names the rule and counts its matches (never the value); location ``text``.
    """
    counts: dict[str, int] = {}
    for rule in rules:

        def replace(match: re.Match[str], rule: SecretRule = rule) -> str:
            counts[rule.name] = counts.get(rule.name, 0) + 1
            if rule.group == 0:
                return f"[REDACTED:{rule.name}]"
            whole = match.group(0)
            start, end = match.span(rule.group)
            offset = match.start(0)
            return whole[: start - offset] + f"[REDACTED:{rule.name}]" + whole[end - offset :]

        text = rule.pattern.sub(replace, text)
    hits = tuple(RedactionHit(rule=name, location="text", count=n) for name, n in counts.items())
    return text, hits


def redact_headers(
    headers: Iterable[HeaderPair], extra: Iterable[str] = ()
) -> tuple[tuple[HeaderPair, ...], tuple[str, ...]]:
    """Drop sensitive headers; return (kept headers, names removed, lower case, sorted)."""
    names = SENSITIVE_HEADERS | {h.lower() for h in extra}
    kept: list[HeaderPair] = []
    removed: set[str] = set()
    for header in headers:
        if header.name.lower() in names:
            removed.add(header.name.lower())
        else:
            kept.append(header)
    return tuple(kept), tuple(sorted(removed))


def redact_exchange_headers(exchange: Exchange, extra: Iterable[str] = ()) -> Exchange:
    """``exchange`` without sensitive request/response headers, its report updated.

    Returns the same object when nothing had to be removed.
    """
    request_headers, removed_req = redact_headers(exchange.request.headers, extra)
    response = exchange.response
    removed_resp: tuple[str, ...] = ()
    if response is not None:
        response_headers, removed_resp = redact_headers(response.headers, extra)
        if removed_resp:
            response = response.model_copy(update={"headers": response_headers})
    removed = tuple(sorted(set(removed_req) | set(removed_resp)))
    if not removed:
        return exchange
    report = exchange.redaction
    merged = tuple(sorted(set(report.headers_removed) | set(removed)))
    return exchange.model_copy(
        update={
            "request": exchange.request.model_copy(update={"headers": request_headers}),
            "response": response,
            "redaction": RedactionReport(headers_removed=merged, hits=report.hits),
        }
    )


def strip_url_credentials(url: str) -> str:
    """``url`` without a ``user:password@`` part (other URLs are returned unchanged)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@")
"""``user:password@`` after a URL scheme, inside free text (an error message)."""


def scrub_url_credentials(text: str) -> tuple[str, int]:
    """``text`` with every ``scheme://user:password@`` losing its ``user:password`` (replaced
    by ``[REDACTED:url_credentials]``); returns the text and the number replaced."""
    return URL_CREDENTIALS.subn("[REDACTED:url_credentials]@", text)
