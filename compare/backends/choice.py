"""The measured ``auto`` choice: time the backends on a sample, keep the fastest that agrees."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from shadoweval.compare.backends.atomic_files import atomic_write
from shadoweval.compare.backends.devices import (
    BACKENDS,
    candidate_backends,
    cpu_flags,
    cpu_model,
    library_versions,
)
from shadoweval.errors import ConfigError

MIN_SPEEDUP: Final = 1.05
"""``auto`` takes a backend only when its wordpieces/s are at least this × fp32's."""
MAX_MEAN_ABS_DCOS: Final = 0.002
"""Largest mean |Δcos| of the sample's pair cosines vs fp32 that ``auto`` accepts: a fifth of
the default similarity ``noise_margin`` (0.01 on D = 1 − cosine, ``stats/default_policy.yaml``)."""
MAX_MAX_ABS_DCOS: Final = 0.01
"""Largest single |Δcos| ``auto`` accepts: the whole default ``noise_margin`` (0.01)."""

_CHOICE_ROUNDS: Final = 2

_log = logging.getLogger("shadoweval.compare.backends")
"""The logger of the backends (its name from before they were a package)."""


def sample_texts() -> list[str]:
    """The fixed sample ``auto`` measures on: 48 paragraphs of this project's docs.

    Package data ``compare/data/backend_sample.json``; never the evaluation data.
    """
    raw = (
        resources.files("shadoweval.compare.data")
        .joinpath("backend_sample.json")
        .read_text("utf-8")
    )
    texts = json.loads(raw)["texts"]
    return [str(t) for t in texts]


def _edited(text: str) -> str:
    """``text`` with a small edit (its second half's words in reverse order, one dropped)."""
    words = text.split()
    half = len(words) // 2
    tail = words[half:][::-1][1:]
    return " ".join(words[:half] + tail)


@dataclass(frozen=True, slots=True)
class BackendMeasurement:
    """One backend on the sample: speed and agreement with torch-fp32.

    ``wordpieces_per_s``: the sample's wordpieces over the best of the timed passes;
    ``mean_abs_dcos`` / ``max_abs_dcos``: |cos_backend − cos_fp32| over the sample's pairs.
    """

    backend: str
    wordpieces_per_s: float
    mean_abs_dcos: float
    max_abs_dcos: float


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """What ``auto`` chose, why, and whether it came from the cache file."""

    backend: str
    measurements: tuple[BackendMeasurement, ...]
    cached: bool
    measure_s: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (the compare report's ``backend_choice``)."""
        return {
            "backend": self.backend,
            "cached": self.cached,
            "measure_s": round(self.measure_s, 3),
            "measurements": [
                {
                    "backend": m.backend,
                    "wordpieces_per_s": round(m.wordpieces_per_s, 1),
                    "mean_abs_dcos": m.mean_abs_dcos,
                    "max_abs_dcos": m.max_abs_dcos,
                }
                for m in self.measurements
            ],
        }


EmbedFn = Callable[[str, Sequence[str]], npt.NDArray[np.float32]]
"""``embed(backend, texts)`` → unit vectors ``(len(texts), d)``."""
MeasureFn = Callable[[Sequence[str], EmbedFn, Sequence[int]], list[BackendMeasurement]]
"""``measure(backends, embed, token_counts)`` → one measurement per backend."""


def measure_backends(
    backends: Sequence[str],
    embed: EmbedFn,
    token_counts: Sequence[int],
    *,
    rounds: int = _CHOICE_ROUNDS,
    texts: Sequence[str] | None = None,
) -> list[BackendMeasurement]:
    """Time each backend on the sample, interleaved, and compare its pair cosines to fp32.

    Each backend embeds the sample texts and their edited copies once (which also warms it
    up); then ``rounds`` round-robin passes over the backends embed the sample texts again
    and the best pass counts (wordpieces/s = ``sum(token_counts)`` / seconds). Pairs are
    consecutive sample texts and each text with its edited copy; |Δcos| is against the
    first backend (``torch-fp32``). A backend whose ``embed`` raises ConfigError (an ONNX
    export that cannot be written: a read-only cache) is logged and left out; the first
    backend's ConfigError is raised.
    """
    sample = list(texts) if texts is not None else sample_texts()
    edited = [_edited(t) for t in sample]
    n = len(sample)
    pair_cos: dict[str, npt.NDArray[np.float64]] = {}
    usable: list[str] = []
    for backend in backends:
        try:
            vectors = np.asarray(embed(backend, sample + edited), dtype=np.float64)
        except ConfigError as exc:
            if not usable:  # the fp32 reference itself: nothing to compare against
                raise
            # An ONNX backend whose export cannot be written (a read-only cache) is left
            # out of the choice rather than failing the worker.
            _log.warning("backend %s left out of the auto choice: %s", backend, exc)
            continue
        usable.append(backend)
        a, b = vectors[:n], vectors[n:]
        consecutive = (a[:-1] * a[1:]).sum(axis=1)
        self_edit = (a * b).sum(axis=1)
        pair_cos[backend] = np.concatenate([consecutive, self_edit])
    backends = usable
    best_s = dict.fromkeys(backends, float("inf"))
    for _ in range(rounds):
        for backend in backends:
            started = time.perf_counter()
            embed(backend, sample)
            best_s[backend] = min(best_s[backend], time.perf_counter() - started)
    reference = pair_cos[backends[0]]
    wordpieces = float(sum(token_counts))
    out = []
    for backend in backends:
        delta = np.abs(pair_cos[backend] - reference)
        out.append(
            BackendMeasurement(
                backend=backend,
                wordpieces_per_s=wordpieces / max(best_s[backend], 1e-9),
                mean_abs_dcos=float(delta.mean()),
                max_abs_dcos=float(delta.max()),
            )
        )
    return out


def pick_backend(measurements: Sequence[BackendMeasurement]) -> str:
    """The rule of ``auto``: the fastest backend ≥ 1.05 × fp32 and within the |Δcos| limits.

    A backend qualifies when its wordpieces/s are ≥ :data:`MIN_SPEEDUP` × torch-fp32's, its
    mean |Δcos| ≤ :data:`MAX_MEAN_ABS_DCOS` and its max |Δcos| ≤ :data:`MAX_MAX_ABS_DCOS`;
    the fastest qualifying one wins, none qualifying (or a tie with fp32) gives torch-fp32.

    Raises:
        ValueError: no ``torch-fp32`` measurement.
    """
    by_name = {m.backend: m for m in measurements}
    if "torch-fp32" not in by_name:
        raise ValueError("the measurements must include torch-fp32, the reference")
    floor = by_name["torch-fp32"].wordpieces_per_s * MIN_SPEEDUP
    best = "torch-fp32"
    best_speed = 0.0
    for m in measurements:
        if m.backend == "torch-fp32":
            continue
        ok = (
            m.wordpieces_per_s >= floor
            and m.mean_abs_dcos <= MAX_MEAN_ABS_DCOS
            and m.max_abs_dcos <= MAX_MAX_ABS_DCOS
        )
        if ok and m.wordpieces_per_s > best_speed:
            best, best_speed = m.backend, m.wordpieces_per_s
    return best


def fingerprint(
    device_type: str, threads: int, flags: frozenset[str] | None = None
) -> dict[str, Any]:
    """What the cached choice depends on: CPU model and flags, library versions, threads."""
    import torch

    versions: dict[str, str] = {"torch": str(torch.__version__)}
    with contextlib.suppress(ImportError):
        versions = library_versions()
    return {
        "device_type": device_type,
        "cpu_model": cpu_model(),
        "cpu_flags": sorted(cpu_flags() if flags is None else flags),
        "versions": versions,
        "threads": threads,
    }


def choose_backend(
    weights_sha256: str,
    device_type: str,
    embed: EmbedFn,
    count_tokens: Callable[[Sequence[str]], list[int]],
    *,
    cache_dir: Path,
    threads: int,
    measure: MeasureFn | None = None,
    flags: frozenset[str] | None = None,
) -> BackendChoice:
    """Resolve ``auto``: reuse the cached choice or measure the candidates and pick.

    The cache file is ``<cache_dir>/backend-choice-<weights_sha256[:16]>.json`` holding the
    :func:`fingerprint` and the measurements; it is reused when its fingerprint equals the
    current one (same CPU model and flags, library versions, thread count), else the
    candidates (:func:`candidate_backends`) are measured again (``measure``, default
    :func:`measure_backends`; the seam tests use) and the file rewritten atomically.

    Raises:
        ValueError: ``measure`` gave no torch-fp32 measurement.
    """
    path = cache_dir / f"backend-choice-{weights_sha256[:16]}.json"
    current = fingerprint(device_type, threads, flags)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored["fingerprint"] == current and stored["backend"] in BACKENDS:
            return BackendChoice(
                backend=str(stored["backend"]),
                measurements=tuple(BackendMeasurement(**m) for m in stored["measurements"]),
                cached=True,
                measure_s=0.0,
            )
    started = time.perf_counter()
    backends = candidate_backends(device_type, flags=flags)
    if measure is None:
        sample = sample_texts()
        measurements = measure_backends(backends, embed, count_tokens(sample), texts=sample)
    else:
        measurements = measure(backends, embed, count_tokens(sample_texts()))
    chosen = pick_backend(measurements)
    elapsed = time.perf_counter() - started
    record = {
        "fingerprint": current,
        "backend": chosen,
        "measurements": [asdict(m) for m in measurements],
        "measure_s": elapsed,
    }
    with contextlib.suppress(OSError):  # a read-only cache only costs a re-measure next time
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=2) + "\n", "utf-8"))
    return BackendChoice(
        backend=chosen, measurements=tuple(measurements), cached=False, measure_s=elapsed
    )
