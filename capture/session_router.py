"""The session router of the canary split: an ``ExternalProcessor`` that picks each
request's arm so a multi-turn session stays on one version.

Envoy's router ext_proc filter (:mod:`shadoweval.capture.envoy_config`, canary on) sends the request
headers of every request and waits at most ``envoy.canary.router_timeout_ms`` for the
answer; :class:`SessionRouter` answers with a header mutation setting
``x-shadow-eval-arm: baseline|candidate`` and ``clear_route_cache``, so Envoy matches the
route again and takes the arm's route of the split file (:mod:`shadoweval.capture.canary_split`).
When it does not answer in time (down, slow, broken), Envoy goes on without the header
(``failure_mode_allow``) and the file's weighted fallback decides.

The decision, for the session key (the first present of ``capture.session_headers``,
the key sampling uses) and the current share ``s`` (:attr:`Split.candidate_share`):

* ``s == 0`` ⇒ baseline for everyone (reason ``rolled_back``: a rollback overrides
  pins, and the session's pin is set to the baseline, so it stays there if the share
  moves again); ``s == 1`` ⇒ candidate for every new session (``full``), while a session
  pinned to the baseline finishes its conversation there (``pinned``);
* a session seen before keeps its arm (``pinned``);
* a new session gets the candidate iff ``stable_bucket(key) < s × WEIGHT_TOTAL``
  (``new``; the bucket is Envoy's own xxHash64 of the header, so the fallback agrees):
  raising the share never moves a pinned session, and a session first seen later at a
  higher share lands by the same monotone rule (a bucket under the old share
  is under the new one too);
* no session key ⇒ a per-request draw at the share (``no_session``).

Pins are a bounded LRU (:class:`PinTable`: at most ``max_pinned_sessions``, the least
recently seen forgotten first, and a session unseen for ``pin_idle_s`` forgotten); the
table holds a keyed hash of the session key, never the key. A forgotten session is a new
session again: it lands by the monotone rule at the current share, which is its old arm
unless its pin came from a smaller share (or a 0 / 1 override).

The split file is re-read when its ``(inode, mtime, size)`` changes, checked at most every
``reload_interval_s`` (200 ms) by a background task, never per request; a file that
cannot be read keeps the last good split (logged, counted). One router per front end:
several replicas each have their own pins, which agree for new sessions (the bucket is
stable across processes) but not after a share change — see docs/capture.md.

The front end runs it in its own process (:mod:`shadoweval.capture.router_process`: normal
priority, its own event loop and GIL); the metrics below live in that process's registry
and are collected into the front end's at each scrape of its admin port:
``shadoweval_canary_decisions_total{arm,reason}``,
``shadoweval_canary_pinned_sessions``, ``shadoweval_canary_split_share``,
``shadoweval_canary_split_revision``, ``shadoweval_canary_split_reload_errors_total``.

Source: Envoy's ``envoy/service/ext_proc/v3/external_processor.proto``
(``HeadersResponse``, ``CommonResponse.header_mutation``, ``clear_route_cache``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc
import xxhash
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from prometheus_client import CollectorRegistry

from shadoweval.capture.canary_split import (
    ARM_HEADER,
    SPLIT_FILE,
    WEIGHT_TOTAL,
    Arm,
    Split,
    read_split,
)
from shadoweval.errors import ConfigError
from shadoweval.probes import MetricSet, counter, gauge

logger = logging.getLogger(__name__)

BUCKET_KEY = b"shadow-eval.canary.bucket.v1"
"""The key of :func:`stable_bucket`'s BLAKE2b hash (fixed: every process, every replica
and every restart puts a session in the same bucket)."""

REASONS = ("pinned", "new", "no_session", "rolled_back", "full")
"""``reason`` labels of ``shadoweval_canary_decisions_total``."""


def stable_bucket(key: str | bytes) -> int:
    """The session key's bucket in ``[0, WEIGHT_TOTAL)``: xxHash64 (seed 0) of the key's
    UTF-8 bytes mod :data:`WEIGHT_TOTAL` — the hash Envoy computes for the route's header
    ``hash_policy`` (``HashUtil::xxHash64`` of the first present session header), which
    its weighted fallback takes mod the total weight with the candidate cluster listed
    first (:func:`shadoweval.capture.canary_split.render_split_routes`). So when the router does not
    answer in time, Envoy's fallback puts a session where the router's rule would: only a
    session pinned at an earlier share (in the band a share change just moved) or after a
    0 / 1 override can differ. Stable across processes and Python versions (not
    ``hash()``, which is salted per process).

    Source: Envoy ``source/common/http/hash_policy.cc`` (header hash),
    ``source/common/router/config_impl.cc`` (``pickWeightedCluster``: the hash mod the
    total weight, clusters in order); xxHash (Y. Collet), XXH64 with seed 0.
    """
    data = key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key
    return int(xxhash.xxh64_intdigest(data)) % WEIGHT_TOTAL


def session_key(headers: Iterable[tuple[bytes, bytes]], names: Sequence[str]) -> bytes | None:
    """The value of the first of ``names`` (case-insensitive) present in ``headers``, as
    bytes; ``None`` when none is — the same key as
    :meth:`shadoweval.capture.sampling.StickySampler.session_key_hash` hashes."""
    found: dict[bytes, bytes] = {}
    for header, raw in headers:
        found.setdefault(header.lower(), raw)
    for name in names:
        value = found.get(name.lower().encode("latin-1"))
        if value is not None:
            return value
    return None


class PinTable:
    """Sessions' arms: a bounded LRU with idle expiry.

    Args:
        max_entries: the most sessions held (the least recently seen is forgotten first).
        idle_s: a session unseen this long, seconds, is forgotten.
        clock: seconds, monotonic (a seam for tests).

    Keys are opaque bytes (the router stores a keyed hash of the session key).

    Raises:
        ConfigError: ``max_entries`` < 1 or ``idle_s`` <= 0.
    """

    def __init__(
        self, max_entries: int, idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 1:
            raise ConfigError(
                f"max_pinned_sessions must be >= 1, got {max_entries}",
                field="envoy.canary.max_pinned_sessions",
                value=max_entries,
            )
        if not idle_s > 0:
            raise ConfigError(
                f"pin_idle_s must be > 0, got {idle_s}",
                field="envoy.canary.pin_idle_s",
                value=idle_s,
            )
        self.max_entries = max_entries
        self.idle_s = idle_s
        self._clock = clock
        self._pins: OrderedDict[bytes, tuple[Arm, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, key: bytes) -> Arm | None:
        """The session's arm (and it counts as seen now), or ``None`` when unknown or idle
        past ``idle_s`` (then forgotten)."""
        entry = self._pins.get(key)
        if entry is None:
            return None
        now = self._clock()
        if now - entry[1] > self.idle_s:
            del self._pins[key]
            return None
        self._pins[key] = (entry[0], now)
        self._pins.move_to_end(key)
        return entry[0]

    def set(self, key: bytes, arm: Arm) -> None:
        """Pin the session to ``arm`` (seen now); forget the oldest over ``max_entries``
        and, from the old end, those idle past ``idle_s``."""
        now = self._clock()
        self._pins[key] = (arm, now)
        self._pins.move_to_end(key)
        while len(self._pins) > self.max_entries:
            self._pins.popitem(last=False)
        # expire from the least recently seen end (amortised: stops at the first fresh one)
        while self._pins:
            oldest_key, (_arm, seen) = next(iter(self._pins.items()))
            if now - seen <= self.idle_s:
                break
            del self._pins[oldest_key]


class RouterMetrics(MetricSet):
    """The session router's metrics (see the module docstring)."""

    decisions = counter(
        "shadoweval_canary_decisions_total",
        "Arm decisions of the canary session router, by arm and reason.",
        "arm",
        "reason",
    )
    pinned = gauge("shadoweval_canary_pinned_sessions", "Sessions whose arm the router remembers.")
    share = gauge(
        "shadoweval_canary_split_share",
        "The candidate's share of the split the router applies (0..1).",
    )
    revision = gauge(
        "shadoweval_canary_split_revision", "The revision of the split file the router applies."
    )
    reload_errors = counter(
        "shadoweval_canary_split_reload_errors_total",
        "Split files the router could not read (it kept the last good split).",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        for arm in ("baseline", "candidate"):
            for reason in REASONS:
                self.decisions.labels(arm=arm, reason=reason)


class SessionRouter(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The gRPC servicer deciding each request's arm (see the module docstring).

    Args:
        split_dir: the directory holding ``split.yaml``.
        session_headers: the session key's headers (``capture.session_headers``).
        registry: where the metrics go (the router process's own).
        max_pinned_sessions, pin_idle_s: the pin table's bounds.
        reload_interval_s: how often the file's ``(inode, mtime, size)`` is checked.
        rng: draws for requests without a session key (a seam for tests).

    :meth:`start` reads the split (it must exist: the front end writes revision 0 first)
    and starts the reload task; :meth:`stop` ends it.

    Raises:
        ConfigError: (from :meth:`start`) the split file is missing or malformed.
    """

    def __init__(
        self,
        split_dir: Path,
        session_headers: Sequence[str],
        registry: CollectorRegistry,
        *,
        max_pinned_sessions: int = 1_000_000,
        pin_idle_s: float = 86400.0,
        reload_interval_s: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.split_dir = Path(split_dir)
        self.session_headers = tuple(session_headers)
        self.registry = registry
        self.metrics = RouterMetrics(registry)
        self.pins = PinTable(max_pinned_sessions, pin_idle_s)
        self.reload_interval_s = reload_interval_s
        self._rng = rng or random.Random()
        self.split = Split(candidate_share=0.0, revision=0)
        self._stamp: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._children: dict[tuple[str, str], Any] = {}

    # -- the split file --------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.split_dir / SPLIT_FILE)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def reload(self) -> bool:
        """Re-read the split file if its stamp changed; True when a new split applies.

        A file that cannot be read keeps the last good split (logged, counted).
        """
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return False
        try:
            split = read_split(self.split_dir)
        except ConfigError as exc:
            self._stamp = stamp  # counted once per bad file, not per poll
            self.metrics.reload_errors.inc()
            logger.warning(
                "split file not applied (keeping revision %d): %s", self.split.revision, exc
            )
            return False
        self._stamp = stamp
        changed = split != self.split
        self.split = split
        self.metrics.share.set(split.candidate_share)
        self.metrics.revision.set(split.revision)
        if changed:
            logger.info(
                "split revision %d: candidate share %.4f", split.revision, split.candidate_share
            )
        return changed

    async def start(self) -> None:
        """Read the split file and start watching it.

        Raises:
            ConfigError: the split file is missing or malformed.
        """
        self.split = read_split(self.split_dir)
        self._stamp = self._file_stamp()
        self.metrics.share.set(self.split.candidate_share)
        self.metrics.revision.set(self.split.revision)
        self._task = asyncio.create_task(self._watch(), name="canary-split-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval_s)
            try:
                self.reload()
            except Exception:  # never let the watch die
                logger.exception("split reload failed")

    async def stop(self) -> None:
        """Stop watching the split file (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- decisions -------------------------------------------------------------------

    def decide(self, key: bytes | None) -> tuple[Arm, str]:
        """``(arm, reason)`` for a request of session ``key`` (``None``: no session key)
        at the current split; updates the pin table and the decision counter."""
        share = self.split.candidate_share
        pin_key = (
            None if key is None else hashlib.blake2b(key, digest_size=16, key=BUCKET_KEY).digest()
        )
        arm: Arm
        pinned = self.pins.get(pin_key) if pin_key is not None else None
        if share <= 0.0:
            arm, reason = "baseline", "rolled_back"
        elif share >= 1.0:
            # full rollout: new sessions all go to the candidate, but a conversation pinned
            # to the baseline finishes there (it is forgotten after pin_idle_s)
            arm, reason = (pinned, "pinned") if pinned is not None else ("candidate", "full")
        elif key is None:
            arm = "candidate" if self._rng.random() < share else "baseline"
            reason = "no_session"
        else:
            assert pin_key is not None
            if pinned is not None:
                arm, reason = pinned, "pinned"
            else:
                arm = (
                    "candidate" if stable_bucket(key) < self.split.candidate_weight else "baseline"
                )
                reason = "new"
        if pin_key is not None and reason != "pinned":
            self.pins.set(pin_key, arm)
        child = self._children.get((arm, reason))
        if child is None:
            child = self._children[(arm, reason)] = self.metrics.decisions.labels(
                arm=arm, reason=reason
            )
        child.inc()
        self.metrics.pinned.set(len(self.pins))
        return arm, reason

    def _answer(self, msg: Any) -> Any:
        headers = [
            (h.key.encode("latin-1"), h.raw_value if h.raw_value else h.value.encode("latin-1"))
            for h in msg.request_headers.headers.headers
        ]
        arm, _reason = self.decide(session_key(headers, self.session_headers))
        mutation = ext_proc_pb2.HeaderMutation(
            set_headers=[
                base_pb2.HeaderValueOption(
                    header=base_pb2.HeaderValue(key=ARM_HEADER, raw_value=arm.encode("ascii")),
                    append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
                )
            ]
        )
        return ext_proc_pb2.ProcessingResponse(
            request_headers=ext_proc_pb2.HeadersResponse(
                response=ext_proc_pb2.CommonResponse(
                    header_mutation=mutation, clear_route_cache=True
                )
            )
        )

    async def Process(  # noqa: N802 (the gRPC method's name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Answer the request headers with the arm; nothing else is asked for (the
        filter's processing mode skips every other part)."""
        async for msg in request_iterator:
            if msg.WhichOneof("request") == "request_headers":
                yield self._answer(msg)
                return
