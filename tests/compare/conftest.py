"""Fixtures of the compare tests: the real MiniLM encoder (loaded once) and AlpacaEval rows."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from shadoweval.compare.encoders import MiniLMEncoder

ALPACA_PAIRS = (
    ("Meta-Llama-3-8B-Instruct", "Meta-Llama-3.1-8B-Instruct-Turbo"),
    ("Qwen1.5-72B-Chat", "Qwen2-72B-Instruct"),
)


@pytest.fixture(scope="session")
def minilm() -> MiniLMEncoder:
    """The real all-MiniLM-L6-v2 encoder on CPU from the bundled weights, offline."""
    assert os.environ.get("HF_HUB_OFFLINE") == "1", "tests must run with HF_HUB_OFFLINE=1"
    started = time.perf_counter()
    encoder = MiniLMEncoder(device="cpu", batch_size=32)
    print(f"MiniLM loaded in {time.perf_counter() - started:.1f} s")  # shown with -s
    return encoder


@pytest.fixture(scope="session")
def alpaca(shared_data: Path) -> dict[str, list[dict[str, Any]]]:
    """AlpacaEval model outputs by model name (805 rows each, same prompt order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for pair in ALPACA_PAIRS:
        for model in pair:
            path = shared_data / "alpaca_eval" / model / "model_outputs.json"
            out[model] = json.loads(path.read_text(encoding="utf-8"))
    return out
