"""The MiniLM transformer exported to ONNX (fp32 and int8) once per weights, cached."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from shadoweval.compare.backends.atomic_files import atomic_write, file_sha256
from shadoweval.compare.backends.devices import library_versions
from shadoweval.errors import ConfigError

ONNX_INPUTS: Final = ("input_ids", "attention_mask", "token_type_ids")
"""The exported graph's inputs, int64 ``(batch, seq)``, in the order they are passed."""
_OPSET: Final = 17
_FILES: Final = ("model.onnx", "model-int8.onnx")


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
        return all(file_sha256(folder / name) == sha for name, sha in files.items())
    except OSError:
        return False


def _fp32_exporter(transformer: Any, tokenizer: Any) -> Callable[[Path], None]:
    """``export(tmp)``: the transformer's last hidden state traced to ONNX (opset 17) in
    ``tmp``, both axes of every input and of the output dynamic."""
    import torch

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
    args = tuple(example[name] for name in ONNX_INPUTS)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*ONNX_INPUTS, "last_hidden_state")}
    wrapper = _LastHidden(transformer).eval()

    def export_fp32(tmp: Path) -> None:
        import warnings

        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings of the exporter
            torch.onnx.export(
                wrapper,
                args,
                str(tmp),
                input_names=list(ONNX_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                dynamo=False,
            )

    return export_fp32


def _quantize_int8(model_file: Path, tmp: Path) -> None:
    """``model_file`` quantized dynamically (signed int8 weights, per channel) into ``tmp``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "consider pre-processing" warning on the root logger
    try:
        quantize_dynamic(model_file, tmp, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


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
    folder = cache_dir / "onnx" / weights_sha256[:16]
    versions = library_versions()
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
    export_fp32 = _fp32_exporter(transformer, tokenizer)
    try:
        atomic_write(folder / "model.onnx", export_fp32)
        atomic_write(
            folder / "model-int8.onnx", lambda tmp: _quantize_int8(folder / "model.onnx", tmp)
        )
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
        "files": {name: file_sha256(folder / name) for name in _FILES},
    }
    atomic_write(
        folder / "manifest.json",
        lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8"),
    )
    return folder
