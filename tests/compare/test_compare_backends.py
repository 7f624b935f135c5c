"""Embedding backends on the real MiniLM: agreement with torch-fp32 and the ONNX export cache.

One ONNX export per test session (``onnx_cache``: a session tmp cache dir); the export
tests copy it or break it on purpose. No timing is asserted anywhere.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shadoweval.cli import app
from shadoweval.compare.backends import cpu_flags, ensure_onnx_export
from shadoweval.compare.encoders import MiniLMEncoder
from shadoweval.storage import Database, Repository
from tests.compare.test_compare_worker_cache import seed

TEXTS = [
    "Shadow evaluation replays captured traffic against a candidate model.",
    "The gate compares the candidate's answers with the baseline's, pair by pair, and holds "
    "the rollout when the divergence is above the noise floor. " * 3,
    "ok",
    "Paris is the capital of France; Berlin is the capital of Germany.",
]


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir holding one ONNX export of the bundled weights (made once per session)."""
    root = tmp_path_factory.mktemp("backend-cache")
    encoder = MiniLMEncoder(backend="onnx-fp32", cache_dir=root)
    encoder.embed(["export once"])
    return root


@pytest.fixture
def reference(minilm: MiniLMEncoder) -> np.ndarray:
    return minilm.embed(TEXTS)


def export_folder(root: Path) -> Path:
    (folder,) = (root / "onnx").iterdir()
    return folder


def check_close(
    vectors: np.ndarray, reference: np.ndarray, minimum_cos: float, minimum_short: float = 0.0
) -> None:
    """Shape, dtype, unit norm; cosine ≥ ``minimum_cos`` on the sentences and ≥
    ``minimum_short`` (default the same) on the two-letter text ``ok``."""
    assert vectors.shape == reference.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * reference).sum(axis=1)
    short = TEXTS.index("ok")
    assert np.delete(cosines, short).min() >= minimum_cos, cosines
    assert cosines[short] >= (minimum_short or minimum_cos), cosines


@pytest.mark.parametrize(
    ("backend", "minimum_cos", "minimum_short"),
    # int8 (per-channel dynamic quantization): measured 0.992-0.994 on the sentences and
    # 0.970 on "ok" (two wordpieces: quantization noise is not averaged out by pooling) on
    # an Intel Xeon, 0.9476 on "ok" on an AMD EPYC with AVX2 and no VNNI (onnxruntime's
    # int8 kernels differ by instruction set), so the short-text floor is 0.93.
    # The auto rule rejects int8 on its pair cosines anyway (docs/benchmarks.md).
    [("onnx-fp32", 0.999, 0.0), ("onnx-int8", 0.99, 0.93)],
)
def test_onnx_backends_agree_with_torch_fp32(
    backend: str,
    minimum_cos: float,
    minimum_short: float,
    onnx_cache: Path,
    reference: np.ndarray,
) -> None:
    encoder = MiniLMEncoder(backend=backend, cache_dir=onnx_cache)
    check_close(encoder.embed(TEXTS), reference, minimum_cos, minimum_short)
    assert encoder.backend_id == f"{backend}-cpu"
    assert encoder.cache_key.endswith(f":{backend}-cpu")


def test_torch_bf16_agrees_with_torch_fp32(reference: np.ndarray) -> None:
    if not cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        pytest.skip("this CPU has no native bf16 (the refusal is tested with injected flags)")
    encoder = MiniLMEncoder(backend="torch-bf16")
    check_close(encoder.embed(TEXTS), reference, 0.999)
    assert encoder.backend_id == "torch-bf16-cpu"


def test_cache_keys_of_backends_differ(onnx_cache: Path, minilm: MiniLMEncoder) -> None:
    onnx = MiniLMEncoder(backend="onnx-int8", cache_dir=onnx_cache)
    assert minilm.cache_key.endswith(":torch-fp32-cpu")
    assert onnx.cache_key != minilm.cache_key
    assert onnx.cache_key.split(":")[0] == minilm.cache_key.split(":")[0]


@pytest.fixture
def copied_cache(onnx_cache: Path, tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    shutil.copytree(onnx_cache, root)
    return root


def test_a_second_encoder_reuses_the_export(copied_cache: Path) -> None:
    folder = export_folder(copied_cache)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    MiniLMEncoder(backend="onnx-int8", cache_dir=copied_cache).embed(["reuse"])
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert after == before
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.onnx", "model-int8.onnx"}
    assert set(manifest["versions"]) == {"torch", "onnx", "onnxruntime"}


def test_a_manifest_of_other_weights_is_exported_again(copied_cache: Path) -> None:
    folder = export_folder(copied_cache)
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["weights_sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    encoder = MiniLMEncoder(backend="onnx-fp32", cache_dir=copied_cache)
    encoder.embed(["again"])
    rewritten = json.loads(manifest_path.read_text())
    assert rewritten["weights_sha256"] == encoder.weights_sha256


def test_a_corrupt_model_file_is_exported_again(
    copied_cache: Path, minilm: MiniLMEncoder, reference: np.ndarray
) -> None:
    folder = export_folder(copied_cache)
    (folder / "model.onnx").write_bytes(b"not an onnx file")
    model = minilm._model  # the loaded sentence-transformers model (no second load)
    again = ensure_onnx_export(
        model[0].auto_model, model.tokenizer, minilm.weights_sha256, copied_cache
    )
    assert again == folder
    assert (folder / "model.onnx").stat().st_size > 1_000_000
    encoder = MiniLMEncoder(backend="onnx-fp32", cache_dir=copied_cache)
    check_close(encoder.embed(TEXTS), reference, 0.999)
    assert not list(folder.glob("*.tmp")), "no temporary file is left behind"


def test_compare_run_backend_flag_reaches_the_encoder(
    onnx_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Database(url) as db:
        db.upgrade()
        run_id = seed(Repository(db), n=4)
    monkeypatch.setenv("SHADOWEVAL_COMPARE__CACHE_DIR", str(onnx_cache))
    result = CliRunner().invoke(
        app,
        ["compare", "run", "--run", run_id, "--database-url", url, "--backend", "onnx-fp32"],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["scored"] == 4
    assert report["backend"] == "onnx-fp32-cpu"
