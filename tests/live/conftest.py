"""Fixtures of the live-loop tests: a mock-llm live model answering recorded rows, with
canary secrets planted in prompts, streamed answers and tool-call arguments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shadoweval.records import ToolCall
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm.app import create_app
from shadoweval.simulation.mock_llm.faults import FaultConfig
from shadoweval.simulation.mock_llm.latency import NoLatency
from shadoweval.tables import RecordedRow, load_recorded_rows

CANARY_KEY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
"""An API key planted in request headers; must appear in no sink."""
CANARY_EMAIL = "jane.canary@example.com"
"""An e-mail address planted in messages, a streamed answer and tool-call arguments."""
CANARY_FIELD = "hunter2-canary-field-5c1d"
"""A secret shaped like nothing: only the JSON key it sits under (``api_key``,
``password``) says it is one. Planted in request bodies and tool-call arguments."""
CANARY_TOOL_EMAIL = "ops.canary@example.org"
"""An e-mail address planted in a tool's description (``tools[].function.description``)."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an e-mail.",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
}


def _row(key: str, messages: list[dict[str, object]], **kw: object) -> RecordedRow:
    fields: dict[str, object] = {
        "key": key,
        "messages": messages,
        "tools": None,
        "output_text": None,
        "tool_calls": (),
        "task_type": "default",
        "model": "mock-live",
        "latency_ms": None,
        "ttft_ms": None,
        "itl_ms": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "location": f"canary#{key}",
    }
    fields.update(kw)
    return RecordedRow(**fields)  # type: ignore[arg-type]


def canary_rows() -> list[RecordedRow]:
    """Rows whose prompts and answers carry :data:`CANARY_EMAIL`."""
    return [
        _row(
            "canary-text",
            [{"role": "user", "content": f"Write a short note to {CANARY_EMAIL} about lunch."}],
            output_text=(
                f"Sure. Dear {CANARY_EMAIL}, lunch is at noon. "
                "Reply to this address if you cannot make it. Cheers!"
            ),
        ),
        _row(
            "canary-tool",
            [{"role": "user", "content": f"Email {CANARY_EMAIL} that the build is green."}],
            tools=[WEATHER_TOOL],
            tool_calls=(
                ToolCall(
                    index=0,
                    id="call_1",
                    name="send_email",
                    arguments=(
                        f'{{"to": "{CANARY_EMAIL}", "body": "The build is green.", '
                        f'"smtp_password": "{CANARY_FIELD}"}}'
                    ),
                ),
            ),
        ),
    ]


@pytest.fixture(scope="session")
def alpaca_rows(shared_data: Path) -> list[RecordedRow]:
    """The first 60 Llama-3-8B AlpacaEval answers (the live model's recorded outputs)."""
    path = shared_data / "alpaca_eval/Meta-Llama-3-8B-Instruct/model_outputs.json"
    return load_recorded_rows(path, preset="alpaca_eval").rows[:60]


@pytest.fixture(scope="session")
def bfcl_rows(shared_data: Path) -> list[RecordedRow]:
    """The first 20 BFCL tool-call answers of gpt-4o-2024-05-13."""
    path = shared_data / "bfcl/result/gpt-4o-2024-05-13-FC"
    return load_recorded_rows(path, preset="bfcl").rows[:20]


@pytest.fixture
def live_model(alpaca_rows: list[RecordedRow], bfcl_rows: list[RecordedRow]) -> Iterator[str]:
    """A mock-llm "live model" on loopback answering the recorded and canary rows."""
    app = create_app(
        [*alpaca_rows, *bfcl_rows, *canary_rows()],
        latency=NoLatency(),
        faults=FaultConfig(),
        seed=0,
        model_name="mock-live",
    )
    with BackgroundServer(app) as server:
        yield server.url
