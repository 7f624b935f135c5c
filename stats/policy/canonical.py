"""The canonical JSON hash that freezes a written-down policy with what it governs.

Both policies hash the same way: the paired gate's
(:func:`shadoweval.stats.policy.loading.policy_hash`, frozen with a run) and the live
canary's (:func:`shadoweval.stats.canary.policy.canary_policy_hash`, frozen with a canary).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_sha256"]


def canonical_sha256(document: dict[str, Any]) -> str:
    """sha256 hex digest (64 lowercase hex characters) of ``document``'s canonical JSON.

    Canonical JSON: keys sorted, no whitespace, ASCII only, so key order, comments and
    omitted defaults of the YAML the document was read from do not change the hash.

    Raises:
        ValueError: the document holds a NaN or an infinity (not JSON).
    """
    text = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()
