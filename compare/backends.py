"""Inference backends of the MiniLM encoder, and the measured ``auto`` choice (DESIGN §6).

Backends (:data:`BACKENDS`):

* ``torch-fp32`` — the reference: sentence-transformers in float32.
* ``torch-bf16`` — the same model under ``torch.autocast`` in bfloat16, CPU only and only
  where the CPU has native bf16 (``avx512_bf16`` or ``amx_bf16`` in ``/proc/cpuinfo``).
* ``torch-fp16`` — the model in float16, CUDA only.
* ``onnx-fp32`` / ``onnx-int8`` — ONNX Runtime on the transformer exported locally from
  the model's weights (``torch.onnx.export``, the TorchScript exporter, opset 17), int8 by
  ``onnxruntime.quantization.quantize_dynamic`` (signed int8 weights, per channel).
  Mean pooling and L2 normalisation are done in numpy. CPU only.
* ``auto`` — :func:`choose_backend`: the fastest backend that is ≥ :data:`MIN_SPEEDUP` ×
  fp32 and within :data:`MAX_MEAN_ABS_DCOS` / :data:`MAX_MAX_ABS_DCOS` of fp32's pair
  cosines on a fixed sample of real paragraphs, else ``torch-fp32``; the choice is cached.

Exported files live in ``<cache_dir>/onnx/<weights sha256[:16]>/`` (``model.onnx``,
``model-int8.onnx``, ``manifest.json``); :func:`default_cache_dir` is
``$XDG_CACHE_HOME/shadow-eval`` or ``~/.cache/shadow-eval``. Every file is written to a temporary
name and renamed, so a concurrent reader sees a whole file or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from shadoweval.errors import ConfigError

_log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "MAX_MAX_ABS_DCOS",
    "MAX_MEAN_ABS_DCOS",
    "MIN_SPEEDUP",
    "BackendChoice",
    "BackendMeasurement",
    "OnnxRunner",
    "check_backend",
    "choose_backend",
    "cpu_flags",
    "default_cache_dir",
    "ensure_onnx_export",
    "sample_texts",
]

BACKENDS: Final = ("auto", "torch-fp32", "torch-bf16", "torch-fp16", "onnx-fp32", "onnx-int8")
"""Accepted values of ``compare.backend`` / ``--backend``."""

MIN_SPEEDUP: Final = 1.05
"""``auto`` takes a backend only when its wordpieces/s are at least this × fp32's."""
MAX_MEAN_ABS_DCOS: Final = 0.002
"""Largest mean |Δcos| of the sample's pair cosines vs fp32 that ``auto`` accepts: a fifth of
the default similarity ``noise_margin`` (0.01 on D = 1 − cosine, ``stats/default_policy.yaml``)."""
MAX_MAX_ABS_DCOS: Final = 0.01
"""Largest single |Δcos| ``auto`` accepts: the whole default ``noise_margin`` (0.01)."""

_BF16_FLAGS: Final = frozenset({"avx512_bf16", "amx_bf16"})
_ONNX_INPUTS: Final = ("input_ids", "attention_mask", "token_type_ids")
_OPSET: Final = 17
_CHOICE_ROUNDS: Final = 2


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/shadow-eval`` if that variable is set, else ``~/.cache/shadow-eval``.

    (XDG Base Directory Specification.) ``compare.cache_dir``
    (``SHADOWEVAL_COMPARE__CACHE_DIR``) overrides it; a ``SHADOWEVAL_*`` variable that names no
    setting is refused by the settings loader, so there is no separate variable for it.
    """
    value = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(value) if value else Path.home() / ".cache") / "shadow-eval"


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (first ``flags`` line); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_model() -> str:
    """The CPU's ``model name`` from ``/proc/cpuinfo``, else :func:`platform.processor`."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return platform.processor() or platform.machine()


def check_backend(backend: str, device_type: str, *, flags: frozenset[str] | None = None) -> None:
    """Refuse a backend the device cannot run.

    Args:
        backend: one of :data:`BACKENDS`.
        device_type: torch device type (``cpu``, ``cuda``).
        flags: the CPU flags (default :func:`cpu_flags`): the seam tests use.

    Raises:
        ConfigError: (field ``compare.backend``) an unknown name, ``torch-bf16`` off CPU or
            on a CPU without ``avx512_bf16``/``amx_bf16``, ``torch-fp16`` off CUDA, an
            ``onnx-*`` backend off CPU.
    """
    if backend not in BACKENDS:
        raise ConfigError(
            f"compare.backend {backend!r} is not known: use one of {', '.join(BACKENDS)}",
            field="compare.backend",
            value=backend,
        )
    if backend == "torch-bf16":
        if device_type != "cpu":
            raise ConfigError(
                "compare.backend torch-bf16 is for CPUs with native bf16; on cuda use torch-fp16",
                field="compare.backend",
                value=backend,
            )
        have = cpu_flags() if flags is None else flags
        if not have & _BF16_FLAGS:
            raise ConfigError(
                "compare.backend torch-bf16 needs a CPU with native bf16 (avx512_bf16 or "
                "amx_bf16 in /proc/cpuinfo); this CPU has neither: use torch-fp32 or auto",
                field="compare.backend",
                value=backend,
            )
    if backend == "torch-fp16" and device_type != "cuda":
        raise ConfigError(
            "compare.backend torch-fp16 runs on cuda only", field="compare.backend", value=backend
        )
    if backend.startswith("onnx-") and device_type != "cpu":
        raise ConfigError(
            f"compare.backend {backend} runs on cpu only", field="compare.backend", value=backend
        )


def candidate_backends(device_type: str, *, flags: frozenset[str] | None = None) -> list[str]:
    """Backends ``auto`` considers on this device, ``torch-fp32`` first.

    CUDA: ``torch-fp32``, ``torch-fp16``. CPU: ``torch-fp32``, ``torch-bf16`` (native bf16
    only), ``onnx-fp32``, ``onnx-int8`` (when ``onnxruntime`` imports).
    """
    if device_type == "cuda":
        return ["torch-fp32", "torch-fp16"]
    out = ["torch-fp32"]
    have = cpu_flags() if flags is None else flags
    if have & _BF16_FLAGS:
        out.append("torch-bf16")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return out
    return [*out, "onnx-fp32", "onnx-int8"]


# ------------------------------------------------------------------ ONNX export


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


def _atomic_write_bytes(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, then rename it to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _manifest_ok(folder: Path, weights_sha256: str, versions: Mapping[str, str]) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if manifest.get("weights_sha256") != weights_sha256 or manifest.get("versions") != dict(
        versions
    ):
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {"model.onnx", "model-int8.onnx"}:
        return False
    try:
        return all(_file_sha256(folder / name) == sha for name, sha in files.items())
    except OSError:
        return False


def ensure_onnx_export(
    transformer: Any, tokenizer: Any, weights_sha256: str, cache_dir: Path
) -> Path:
    """Export the transformer to ONNX (fp32 and int8) once per weights; return the folder.

    The folder is ``<cache_dir>/onnx/<weights_sha256[:16]>/`` with ``model.onnx`` (inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids``, int64 ``(batch, seq)``; output
    ``last_hidden_state`` float32 ``(batch, seq, hidden)``, both axes dynamic),
    ``model-int8.onnx`` and ``manifest.json`` (source weights sha256, torch/onnx/onnxruntime
    versions, each file's sha256). A folder whose manifest matches (same weights, same
    versions, files with the recorded hashes) is reused; otherwise everything is exported
    again (a corrupt or partial file is never used). Each file is written under a temporary
    name and renamed, the manifest last; two processes exporting at once each write whole
    files (the last rename wins, both are valid).

    Args:
        transformer: the Hugging Face model under sentence-transformers (``model[0].auto_model``).
        tokenizer: its tokenizer (to make the tracing example).
        weights_sha256: the weights' content hash (``MiniLMEncoder.weights_sha256``).
        cache_dir: the cache root.

    Raises:
        ConfigError: (field ``compare.backend``) the export or the quantization failed.

    Source: https://docs.pytorch.org/docs/stable/onnx_torchscript.html (``dynamo=False``),
    https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html (dynamic).
    """
    import torch

    folder = cache_dir / "onnx" / weights_sha256[:16]
    versions = _versions()
    if _manifest_ok(folder, weights_sha256, versions):
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only or root-owned cache: name it, never crash
        raise ConfigError(
            f"cannot create the ONNX export folder {folder}: {exc}",
            field="compare.backend",
            value="onnx",
        ) from exc

    class _LastHidden(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = tokenizer(
        ["an example to trace", "a second, longer example sentence to trace the graph"],
        padding=True,
        return_tensors="pt",
    )
    args = tuple(example[name] for name in _ONNX_INPUTS)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*_ONNX_INPUTS, "last_hidden_state")}
    wrapper = _LastHidden(transformer).eval()

    def export_fp32(tmp: Path) -> None:
        import warnings

        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings of the exporter
            torch.onnx.export(
                wrapper,
                args,
                str(tmp),
                input_names=list(_ONNX_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                dynamo=False,
            )

    def export_int8(tmp: Path) -> None:
        import logging

        from onnxruntime.quantization import QuantType, quantize_dynamic

        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # "consider pre-processing" warning on the root logger
        try:
            quantize_dynamic(
                folder / "model.onnx", tmp, weight_type=QuantType.QInt8, per_channel=True
            )
        finally:
            root.setLevel(level)

    try:
        _atomic_write_bytes(folder / "model.onnx", export_fp32)
        _atomic_write_bytes(folder / "model-int8.onnx", export_int8)
    except Exception as exc:
        raise ConfigError(
            f"exporting the model to ONNX in {folder} failed: {exc}",
            field="compare.backend",
            value="onnx",
        ) from exc
    manifest = {
        "weights_sha256": weights_sha256,
        "versions": versions,
        "opset": _OPSET,
        "files": {name: _file_sha256(folder / name) for name in ("model.onnx", "model-int8.onnx")},
    }
    _atomic_write_bytes(
        folder / "manifest.json",
        lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8"),
    )
    return folder


class OnnxRunner:
    """An ONNX Runtime session on an exported transformer, with numpy mean pooling.

    ``intra_op_num_threads`` is ``torch.get_num_threads()`` (so ``compare run --workers N``
    splits the cores as it does for torch); one inter-op thread.

    Args:
        model_file: ``model.onnx`` or ``model-int8.onnx`` from :func:`ensure_onnx_export`.
        threads: intra-op threads; default torch's thread count.

    Raises:
        ConfigError: (field ``compare.backend``) the file cannot be loaded.
    """

    def __init__(self, model_file: Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(model_file), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ConfigError(
                f"cannot load ONNX model {model_file}: {exc}",
                field="compare.backend",
                value=str(model_file),
            ) from exc

    def embed(self, features: Mapping[str, npt.NDArray[np.int64]]) -> npt.NDArray[np.float32]:
        """Mean-pool and L2-normalise one padded batch: ``(batch, seq)`` ids → ``(batch, d)``."""
        feeds = {name: np.asarray(features[name], dtype=np.int64) for name in _ONNX_INPUTS}
        hidden = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit


# ----------------------------------------------------------------- auto choice


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
        versions = _versions()
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
        "measurements": [
            {
                "backend": m.backend,
                "wordpieces_per_s": m.wordpieces_per_s,
                "mean_abs_dcos": m.mean_abs_dcos,
                "max_abs_dcos": m.max_abs_dcos,
            }
            for m in measurements
        ],
        "measure_s": elapsed,
    }
    with contextlib.suppress(OSError):  # a read-only cache only costs a re-measure next time
        _atomic_write_bytes(
            path, lambda tmp: tmp.write_text(json.dumps(record, indent=2) + "\n", "utf-8")
        )
    return BackendChoice(
        backend=chosen, measurements=tuple(measurements), cached=False, measure_s=elapsed
    )


@contextlib.contextmanager
def bf16_autocast() -> Iterator[None]:
    """``torch.autocast("cpu", dtype=torch.bfloat16)`` with ``torch.inference_mode``."""
    import torch

    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        yield
