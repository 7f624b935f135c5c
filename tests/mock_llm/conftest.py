"""Fixtures of the mock-llm tests: recorded rows from the real data, anyio on asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadoweval.tables import RecordedRow, load_recorded_rows


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def alpaca_rows(shared_data: Path) -> list[RecordedRow]:
    path = shared_data / "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json"
    return load_recorded_rows(path, preset="alpaca_eval").rows


@pytest.fixture(scope="session")
def bfcl_rows(shared_data: Path) -> list[RecordedRow]:
    return load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl").rows
