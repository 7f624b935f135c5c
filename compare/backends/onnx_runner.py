"""An ONNX Runtime session on an exported transformer, with numpy mean pooling."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shadoweval.compare.backends.onnx_export import ONNX_INPUTS
from shadoweval.errors import ConfigError


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
        feeds = {name: np.asarray(features[name], dtype=np.int64) for name in ONNX_INPUTS}
        hidden = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit
