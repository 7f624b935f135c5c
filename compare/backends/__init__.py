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

from shadoweval.compare.backends.choice import (
    MAX_MAX_ABS_DCOS,
    MAX_MEAN_ABS_DCOS,
    MIN_SPEEDUP,
    BackendChoice,
    BackendMeasurement,
    choose_backend,
    sample_texts,
)
from shadoweval.compare.backends.choice import EmbedFn as EmbedFn
from shadoweval.compare.backends.choice import MeasureFn as MeasureFn
from shadoweval.compare.backends.choice import fingerprint as fingerprint
from shadoweval.compare.backends.choice import measure_backends as measure_backends
from shadoweval.compare.backends.choice import pick_backend as pick_backend
from shadoweval.compare.backends.devices import (
    BACKENDS,
    check_backend,
    cpu_flags,
    default_cache_dir,
)
from shadoweval.compare.backends.devices import bf16_autocast as bf16_autocast
from shadoweval.compare.backends.devices import candidate_backends as candidate_backends
from shadoweval.compare.backends.devices import cpu_model as cpu_model
from shadoweval.compare.backends.onnx_export import ensure_onnx_export
from shadoweval.compare.backends.onnx_runner import OnnxRunner

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
