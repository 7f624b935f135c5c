"""Latency profiles of the mock server: time to first token and inter-token gap per request.

A profile turns (recorded row, number of pieces, a seeded RNG) into :class:`Delays`. The
server seeds the RNG from its seed and the request's prompt key, never from arrival order,
so a run gives every prompt the same delays under any concurrency.

Profiles (``parse_latency_profile`` spec in brackets):

* :class:`NoLatency` [``none``] — answer at once.
* :class:`FixedLatency` [``fixed:TTFT_MS,ITL_MS``] — the same TTFT and ITL for every request.
* :class:`LlmperfLatency` [``llmperf:FILE_OR_DIR``] — per request, one real request of the
  LLMPerf leaderboard (``individual/*.json``) drawn at random: its ``ttft_s`` and its decode
  gap ``(end_to_end_latency_s − ttft_s) / (number_output_tokens − 1)``. LLMPerf's own
  ``inter_token_latency_s`` is ≈ e2e / tokens, which counts the first-token wait again
  (see the data README), so it is not used. Failed requests (``error_code`` set or
  ``error_msg`` non-empty) and requests with fewer than 2 output tokens are skipped first.
* :class:`TableLatency` [``table``] — the row's own columns: ``ttft_ms`` and ``itl_ms``;
  with ``latency_ms`` and ``ttft_ms``, ITL = (latency − TTFT) / (pieces − 1); with only
  ``latency_ms``, the total is spread evenly over the pieces (TTFT = ITL = latency /
  pieces), so the last piece arrives at the recorded latency. Rows without timings fall
  back to another profile (default: none).
"""

from __future__ import annotations

import glob
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from shadoweval.errors import ConfigError
from shadoweval.tables import RecordedRow, read_table
from shadoweval.tables.values import to_python


@dataclass(frozen=True, slots=True)
class Delays:
    """Delays of one response, seconds: before the first piece, and between pieces."""

    ttft_s: float
    itl_s: float

    def total_s(self, pieces: int) -> float:
        """Time of the last piece: ``ttft + (pieces − 1) × itl`` (``ttft`` with ≤ 1 piece)."""
        return self.ttft_s + max(pieces - 1, 0) * self.itl_s


class LatencyProfile(ABC):
    """Where a request's delays come from."""

    @abstractmethod
    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        """Return the delays for answering ``row`` in ``pieces`` pieces."""

    @abstractmethod
    def describe(self) -> str:
        """One line for logs and ``--help`` output."""


@dataclass(frozen=True, slots=True)
class NoLatency(LatencyProfile):
    """Answer immediately."""

    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        return Delays(0.0, 0.0)

    def describe(self) -> str:
        return "none"


@dataclass(frozen=True, slots=True)
class FixedLatency(LatencyProfile):
    """The same TTFT and ITL (milliseconds) for every request."""

    ttft_ms: float
    itl_ms: float

    def __post_init__(self) -> None:
        if self.ttft_ms < 0 or self.itl_ms < 0:
            raise ConfigError("fixed latency must be >= 0 ms", field="latency_profile")

    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        return Delays(self.ttft_ms / 1000.0, self.itl_ms / 1000.0)

    def describe(self) -> str:
        return f"fixed ttft={self.ttft_ms:g} ms itl={self.itl_ms:g} ms"


@dataclass(frozen=True, slots=True)
class LlmperfLatency(LatencyProfile):
    """Real per-request (TTFT, decode ITL) pairs, seconds; one drawn per request."""

    samples: tuple[tuple[float, float], ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.samples:
            raise ConfigError(
                f"no usable llmperf requests in {self.source or 'samples'}",
                field="latency_profile",
            )

    @classmethod
    def from_path(cls, path: str | Path) -> LlmperfLatency:
        """Load ``individual/*.json`` files: a file, the ``individual`` folder or its parent,
        or a glob pattern (``.../individual/*_7b.json`` for every Llama-2-7B run).

        Raises:
            ConfigError: no file, or no successful request with ≥ 2 output tokens.
        """
        if any(ch in str(path) for ch in "*?["):
            files = sorted(Path(p) for p in glob.glob(str(path)))
            path = Path(path)
        else:
            path = Path(path)
            if path.is_dir() and (path / "individual").is_dir():
                path = path / "individual"
            files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise ConfigError(f"llmperf latency file(s) not found: {path}", field="latency_profile")
        samples: list[tuple[float, float]] = []
        for file in files:
            frame = read_table(file, "json")
            needed = {
                "error_code",
                "error_msg",
                "ttft_s",
                "end_to_end_latency_s",
                "number_output_tokens",
            }
            if not needed.issubset(frame.columns):
                continue  # e.g. a summary file: not per-request data
            for raw in frame.to_dict(orient="records"):
                rec = {str(k): to_python(v) for k, v in raw.items()}
                if rec["error_code"] is not None or (rec["error_msg"] or ""):
                    continue
                ttft, e2e, tokens = (
                    rec["ttft_s"],
                    rec["end_to_end_latency_s"],
                    rec["number_output_tokens"],
                )
                if not all(isinstance(v, (int, float)) for v in (ttft, e2e, tokens)):
                    continue
                if tokens < 2 or ttft < 0 or e2e < ttft:
                    continue
                samples.append((float(ttft), (float(e2e) - float(ttft)) / (tokens - 1)))
        return cls(tuple(samples), source=str(path))

    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        ttft, itl = self.samples[rng.randrange(len(self.samples))]
        return Delays(ttft, itl)

    def describe(self) -> str:
        return f"llmperf ({len(self.samples)} requests from {self.source})"


@dataclass(frozen=True, slots=True)
class TableLatency(LatencyProfile):
    """The recorded row's own timings; rows without any use ``fallback``."""

    fallback: LatencyProfile = field(default_factory=NoLatency)

    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        n = max(pieces, 1)
        ttft, itl, total = row.ttft_ms, row.itl_ms, row.latency_ms
        if ttft is not None and itl is not None:
            return Delays(ttft / 1000.0, itl / 1000.0)
        if total is not None and ttft is not None:
            gap = (total - ttft) / (n - 1) if n > 1 else 0.0
            return Delays(ttft / 1000.0, max(gap, 0.0) / 1000.0)
        if total is not None:
            return Delays(total / n / 1000.0, total / n / 1000.0)
        if ttft is not None:
            return Delays(ttft / 1000.0, 0.0)
        return self.fallback.delays(row, pieces, rng)

    def describe(self) -> str:
        return f"table (rows without timings: {self.fallback.describe()})"


def parse_latency_profile(spec: str) -> LatencyProfile:
    """Parse ``none``, ``fixed:TTFT_MS,ITL_MS``, ``llmperf:PATH`` or ``table``.

    Raises:
        ConfigError: an unknown or malformed spec.
    """
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "none" and not arg:
        return NoLatency()
    if kind == "table" and not arg:
        return TableLatency()
    if kind == "fixed":
        parts = [p.strip() for p in arg.split(",")]
        try:
            ttft_ms, itl_ms = (float(p) for p in parts)
        except ValueError:
            raise ConfigError(
                f"latency profile {spec!r}: expected fixed:TTFT_MS,ITL_MS (e.g. fixed:200,30)",
                field="latency_profile",
                value=spec,
            ) from None
        return FixedLatency(ttft_ms, itl_ms)
    if kind == "llmperf" and arg:
        return LlmperfLatency.from_path(arg)
    raise ConfigError(
        f"unknown latency profile {spec!r}; use none, fixed:TTFT_MS,ITL_MS, llmperf:PATH or table",
        field="latency_profile",
        value=spec,
    )
