"""The ``auto`` rule through its ``measure`` seam, the bf16 refusal, config and CLI validation.

No timing and no real measurement: the measurements are given; embedding is a stub
(the choice logic never embeds when ``measure`` is injected).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pydantic
import pytest
from typer.testing import CliRunner

from shadoweval.application.scoring import make_encoder
from shadoweval.cli import app
from shadoweval.compare import backends
from shadoweval.compare.backends import (
    BackendMeasurement,
    candidate_backends,
    check_backend,
    choose_backend,
    pick_backend,
    sample_texts,
)
from shadoweval.config import CompareSettings, load_settings
from shadoweval.errors import ConfigError

SHA = "ab" * 32
BF16 = frozenset({"avx512f", "avx512_bf16"})
NO_BF16 = frozenset({"avx2", "avx512f"})


def m(backend: str, speed: float, mean: float = 0.0, worst: float = 0.0) -> BackendMeasurement:
    return BackendMeasurement(backend, speed, mean, worst)


def test_fast_but_inaccurate_is_rejected() -> None:
    chosen = pick_backend(
        [m("torch-fp32", 1000), m("onnx-int8", 2000, 0.006, 0.048), m("onnx-fp32", 1100)]
    )
    assert chosen == "onnx-fp32"
    assert pick_backend([m("torch-fp32", 1000), m("onnx-int8", 2000, 0.001, 0.02)]) == (
        "torch-fp32"  # mean fine, one pair off by more than the noise margin
    )


def test_slow_or_tied_backends_give_fp32() -> None:
    assert pick_backend([m("torch-fp32", 1000), m("onnx-fp32", 1049)]) == "torch-fp32"
    assert pick_backend([m("torch-fp32", 1000), m("torch-bf16", 1000)]) == "torch-fp32"
    assert pick_backend([m("torch-fp32", 1000), m("torch-bf16", 1050)]) == "torch-bf16"


def test_the_fastest_qualifying_backend_wins() -> None:
    chosen = pick_backend(
        [m("torch-fp32", 1000), m("torch-bf16", 1600, 0.0003, 0.002), m("onnx-fp32", 1100)]
    )
    assert chosen == "torch-bf16"


def test_pick_needs_the_reference() -> None:
    with pytest.raises(ValueError, match="torch-fp32"):
        pick_backend([m("onnx-fp32", 1)])


class Recorder:
    """A ``measure`` seam that returns fixed numbers and counts its calls."""

    def __init__(self, speeds: dict[str, float]) -> None:
        self.speeds = speeds
        self.calls: list[list[str]] = []

    def __call__(
        self, names: Sequence[str], embed: object, token_counts: Sequence[int]
    ) -> list[BackendMeasurement]:
        self.calls.append(list(names))
        assert sum(token_counts) > 0
        return [m(n, self.speeds.get(n, 1000.0)) for n in names]


def never_embed(backend: str, texts: Sequence[str]) -> np.ndarray:
    raise AssertionError("the injected measure does not embed")


def count(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def choose(
    cache: Path, measure: Recorder, *, threads: int = 2, flags: frozenset[str] = BF16
) -> backends.BackendChoice:
    return choose_backend(
        SHA, "cpu", never_embed, count, cache_dir=cache, threads=threads, measure=measure,
        flags=flags,
    )  # fmt: skip


def test_the_choice_is_cached_and_reused(tmp_path: Path) -> None:
    measure = Recorder({"torch-bf16": 1600})
    first = choose(tmp_path, measure)
    assert (first.backend, first.cached) == ("torch-bf16", False)
    assert measure.calls == [["torch-fp32", "torch-bf16", "onnx-fp32", "onnx-int8"]]
    stored = json.loads((tmp_path / f"backend-choice-{SHA[:16]}.json").read_text())
    assert stored["backend"] == "torch-bf16"
    assert stored["fingerprint"]["threads"] == 2
    again = choose(tmp_path, measure)
    assert (again.backend, again.cached) == ("torch-bf16", True)
    assert len(measure.calls) == 1
    assert again.as_dict()["measurements"][1]["backend"] == "torch-bf16"


def test_a_changed_fingerprint_measures_again(tmp_path: Path) -> None:
    measure = Recorder({"onnx-fp32": 1200})
    choose(tmp_path, measure, threads=2)
    other = choose(tmp_path, measure, threads=1)  # --workers 2 on two cores: 1 thread each
    assert other.cached is False
    no_bf16 = choose(tmp_path, measure, threads=1, flags=NO_BF16)
    assert no_bf16.cached is False
    assert "torch-bf16" not in measure.calls[-1]
    assert len(measure.calls) == 3


def test_a_corrupt_choice_file_measures_again(tmp_path: Path) -> None:
    (tmp_path / f"backend-choice-{SHA[:16]}.json").write_text("{not json")
    measure = Recorder({})
    assert choose(tmp_path, measure).backend == "torch-fp32"
    assert len(measure.calls) == 1


def test_cuda_considers_fp32_and_fp16_only() -> None:
    assert candidate_backends("cuda", flags=BF16) == ["torch-fp32", "torch-fp16"]


def test_bf16_is_refused_on_a_cpu_without_native_bf16() -> None:
    check_backend("torch-bf16", "cpu", flags=BF16)
    check_backend("torch-bf16", "cpu", flags=frozenset({"amx_bf16"}))
    with pytest.raises(ConfigError, match="native bf16") as caught:
        check_backend("torch-bf16", "cpu", flags=NO_BF16)
    assert (caught.value.field, caught.value.value) == ("compare.backend", "torch-bf16")
    assert candidate_backends("cpu", flags=NO_BF16)[:2] == ["torch-fp32", "onnx-fp32"]


def test_bf16_refusal_reaches_the_encoder() -> None:
    from shadoweval.compare.encoders import MiniLMEncoder

    with pytest.raises(ConfigError, match="native bf16"):
        MiniLMEncoder(backend="torch-bf16", cpu_flags=NO_BF16)


@pytest.mark.parametrize(
    ("backend", "device", "match"),
    [
        ("torch-fp16", "cpu", "cuda only"),
        ("onnx-int8", "cuda", "cpu only"),
        ("torch-bf16", "cuda", "torch-fp16"),
        ("fast", "cpu", "not known"),
    ],
)
def test_backends_the_device_cannot_run_are_refused(backend: str, device: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        check_backend(backend, device, flags=BF16)
    assert caught.value.value == backend


def test_the_sample_is_real_prose_of_varied_length() -> None:
    texts = sample_texts()
    assert 48 <= len(texts) <= 96
    lengths = sorted(len(t) for t in texts)
    assert lengths[0] < 300 < 1000 < lengths[-1]


def test_config_lists_the_same_backends_and_refuses_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SHADOWEVAL_COMPARE__BACKEND")
    assert CompareSettings().backend == "auto"
    assert load_settings().compare.backend == "auto"
    for name in backends.BACKENDS:
        assert CompareSettings(backend=name).backend == name
    with pytest.raises(pydantic.ValidationError, match="'turbo' is not known"):
        CompareSettings(backend="turbo")
    monkeypatch.setenv("SHADOWEVAL_COMPARE__BACKEND", "turbo")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "turbo" in str(caught.value)


def test_hashing_takes_no_backend_but_the_reference() -> None:
    assert make_encoder("hashing", backend="auto").name == "hashing-256"
    assert make_encoder("hashing", backend="torch-fp32").name == "hashing-256"
    with pytest.raises(ConfigError, match="no inference backend") as caught:
        make_encoder("hashing", backend="onnx-int8")
    assert (caught.value.field, caught.value.value) == ("compare.backend", "onnx-int8")


def test_cli_refuses_an_unknown_backend_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    for command in (
        ["compare", "run", "--run", "r", "--database-url", url, "--backend", "turbo"],
        ["compare", "run", "--run", "r", "--database-url", url, "--encoder", "hashing",
         "--backend", "onnx-int8"],
    ):  # fmt: skip
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 3, result.output
        assert command[-1] in " ".join(result.stderr.split())


def test_evaluate_takes_backend_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "evaluate", "--capture-log", str(tmp_path / "none.jsonl"),
            "--candidate-url", "http://127.0.0.1:9", "--database-url",
            f"sqlite:///{tmp_path / 'r.db'}", "--backend", "turbo", "--no-progress",
        ],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "turbo" in " ".join(result.stderr.split())


def test_a_backend_whose_export_cannot_be_written_is_left_out_of_auto() -> None:
    """A root-owned or read-only cache (a container's mount point) costs the ONNX backends,
    not the worker: auto measures the others."""

    def embed(backend: str, texts: Sequence[str]) -> np.ndarray:
        if backend.startswith("onnx"):
            raise ConfigError("cannot create the ONNX export folder", field="compare.backend")
        rng = np.random.default_rng(len(texts))
        vectors = rng.normal(size=(len(texts), 8))
        normalised: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return normalised

    texts = ["one text", "another text", "a third one"]
    found = backends.measure_backends(
        ["torch-fp32", "onnx-fp32", "onnx-int8"], embed, [3, 3, 4], rounds=1, texts=texts
    )
    assert [x.backend for x in found] == ["torch-fp32"]
    assert backends.pick_backend(found) == "torch-fp32"


def test_the_reference_backend_failing_is_an_error() -> None:
    def embed(backend: str, texts: Sequence[str]) -> np.ndarray:
        raise ConfigError("no", field="compare.backend")

    with pytest.raises(ConfigError):
        backends.measure_backends(["torch-fp32", "onnx-fp32"], embed, [1], rounds=1, texts=["a"])


def test_an_unwritable_cache_folder_names_the_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot create the ONNX export folder"):
        backends.ensure_onnx_export(object(), object(), "f" * 64, blocker / "cache")
