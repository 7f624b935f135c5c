"""What this machine can run: the backends, CPU flags, the cache folder, library versions."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from shadoweval.errors import ConfigError

BACKENDS: Final = ("auto", "torch-fp32", "torch-bf16", "torch-fp16", "onnx-fp32", "onnx-int8")
"""Accepted values of ``compare.backend`` / ``--backend``."""
_BF16_FLAGS: Final = frozenset({"avx512_bf16", "amx_bf16"})


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


def library_versions() -> dict[str, str]:
    """The versions of torch, onnx and onnxruntime (an export's and a choice's context).

    Raises:
        ImportError: one of them is not installed.
    """
    import onnx
    import onnxruntime
    import torch

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


@contextlib.contextmanager
def bf16_autocast() -> Iterator[None]:
    """``torch.autocast("cpu", dtype=torch.bfloat16)`` with ``torch.inference_mode``."""
    import torch

    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        yield
