"""The cache-hit rules of capture and replay: which response headers mark a cached answer."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]+$")
"""An HTTP field name (RFC 9110 §5.1 token), lower case."""


class CacheHitRule(BaseModel):
    """One rule saying a response was served from a cache, by one response header.

    ``header`` is the header name (case-insensitive; stored lower case). Exactly one test:

    * ``contains``: the value contains this text, case-insensitively
      (``X-Cache: Hit from cloudfront``);
    * ``equals``: the value, trimmed, is one of these, case-insensitively
      (``CF-Cache-Status: HIT``);
    * ``greater_than``: the value (its first comma-separated item) is a number greater
      than this (``Age: 12``, RFC 9111 §5.1: seconds since the origin made the response).

    A header that is absent or whose value does not parse as the test needs does not
    match (never an error). Rules are evaluated off the live path
    (:func:`shadoweval.cache_hits.matching_headers`).

    Raises:
        ValueError (a ``ConfigError`` through :func:`load_settings`): a header name that
            is not an HTTP token, no test or more than one, an empty ``contains`` text or
            ``equals`` list.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    header: str
    contains: str | None = None
    equals: tuple[str, ...] | None = None
    greater_than: float | None = None

    @field_validator("header")
    @classmethod
    def _header_token(cls, value: str) -> str:
        name = value.strip().lower()
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header {value!r} is not an HTTP header name")
        return name

    @model_validator(mode="after")
    def _one_test(self) -> CacheHitRule:
        given = [
            n
            for n, v in (
                ("contains", self.contains),
                ("equals", self.equals),
                ("greater_than", self.greater_than),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"cache-hit rule for header {self.header!r} needs exactly one of contains, "
                f"equals, greater_than; got {', '.join(given) or 'none'}"
            )
        if self.contains is not None and not self.contains.strip():
            raise ValueError(f"cache-hit rule for header {self.header!r}: contains is empty")
        if self.equals is not None and not [v for v in self.equals if v.strip()]:
            raise ValueError(f"cache-hit rule for header {self.header!r}: equals is empty")
        return self

    def describe(self) -> str:
        """The rule in words, e.g. ``x-cache contains 'hit'``."""
        if self.contains is not None:
            return f"{self.header} contains {self.contains!r}"
        if self.equals is not None:
            return f"{self.header} is one of {', '.join(self.equals)}"
        return f"{self.header} > {self.greater_than:g}"


_SERVED_FROM_CACHE = ("HIT", "STALE", "UPDATING", "REVALIDATED")

DEFAULT_CACHE_HIT_RULES: tuple[CacheHitRule, ...] = (
    # Fastly, Varnish, Squid, CloudFront ("Hit from cloudfront", "RefreshHit ..."); with
    # shielding Fastly lists several caches ("MISS, HIT"): any entry but MISS served it.
    CacheHitRule(header="x-cache", contains="hit"),
    # Cloudflare: HIT, or served from cache stale / while updating / after revalidation.
    CacheHitRule(header="cf-cache-status", equals=_SERVED_FROM_CACHE),
    # nginx's $upstream_cache_status, by the usual add_header name.
    CacheHitRule(header="x-cache-status", equals=_SERVED_FROM_CACHE),
    # LLM gateways: Cloudflare AI Gateway, Helicone, Portkey (simple and semantic cache).
    CacheHitRule(header="cf-aig-cache-status", equals=("HIT",)),
    CacheHitRule(header="helicone-cache", equals=("HIT",)),
    CacheHitRule(header="x-portkey-cache-status", equals=("HIT", "SEMANTIC HIT")),
    # RFC 9111 §5.1: a response with Age > 0 was stored by a cache before it was sent.
    CacheHitRule(header="age", greater_than=0),
)
"""The default cache-hit rules of capture and replay (docs/capture.md, "Cache hits")."""
