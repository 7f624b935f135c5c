"""The BFCL prompt-mode pair imported and served (issue 29, items 4 and 9c).

``shadow-eval import --preset bfcl`` of NousResearch Hermes-2-Pro-Mistral-7B (only ``id``
and ``result``) writes every row, says latency is unknown, and stores the calls it wrote
as text as real tool calls; the real mock-llm serving Hermes-2-Pro-Llama-3-8B answers
every imported request (no ``prompt_not_recorded``) with tool calls where the candidate
wrote them.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from shadoweval.application.importing import TableSource
from shadoweval.application.mock_llm import MockLlmRequest, build_mock_llm
from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.records import Exchange, TimingSource
from shadoweval.tables import load_recorded_rows

BASE = "NousResearch_Hermes-2-Pro-Mistral-7B"
CAND = "NousResearch_Hermes-2-Pro-Llama-3-8B"

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def imported(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("hermes") / "capture"
    result = CliRunner().invoke(
        app,
        [
            "import", "--preset", "bfcl", "--input", str(shared_data / "bfcl/result" / BASE),
            "--prompts", str(shared_data / "bfcl/data"), "--no-stream", "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output, out


def _exchanges(out: Path) -> list[Exchange]:
    entries = list(read_capture_log(out))
    assert all(e.error is None for e in entries), [e.error for e in entries if e.error]
    return [e.exchange for e in entries if e.exchange is not None]


def test_import_writes_every_row_and_says_latency_is_unknown(imported: tuple[str, Path]) -> None:
    output, out = imported
    text = " ".join(output.split())
    assert "written │ 1700" in text or "written 1700" in text.replace("│", "")
    assert "rejected by reason" not in text
    assert f"{BASE}: no latency column" in text
    assert "latency unknown (not zero)" in text
    exchanges = _exchanges(out)
    assert len(exchanges) == 1700
    assert all(e.timings.source is TimingSource.MISSING for e in exchanges)
    assert all(e.timings.e2e_ms is None for e in exchanges)
    with_calls = [e for e in exchanges if e.response is not None and e.response.tool_calls]
    assert len(with_calls) > 1500
    calls = [c for e in with_calls if e.response is not None for c in e.response.tool_calls]
    # a call cut off before its name (the answer hit the token limit) has none
    assert sum(1 for c in calls if not c.name) <= 10
    # the blocks the leaderboard could not decode keep arguments that do not parse
    assert sum(1 for c in calls if not _parses(c.arguments)) > 50


async def test_mock_llm_answers_every_imported_request(
    imported: tuple[str, Path], shared_data: Path
) -> None:
    _, out = imported
    server = build_mock_llm(
        MockLlmRequest(
            table=TableSource(
                input=shared_data / "bfcl/result" / CAND,
                preset="bfcl",
                prompts=shared_data / "bfcl/data",
            ),
            latency_profile="table",
        )
    )
    assert server.rejected == 0
    assert server.prompts == 1700
    candidate = {
        row.key: row
        for row in load_recorded_rows(shared_data / "bfcl/result" / CAND, preset="bfcl").rows
    }
    statuses: dict[int, int] = {}
    calls_match = 0
    transport = httpx.ASGITransport(app=server.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
        for exchange in _exchanges(out):
            body = orjson.loads(exchange.request.body or b"{}")
            response = await client.post("/v1/chat/completions", json=body)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code != 200:
                continue
            message = response.json()["choices"][0]["message"]
            item = exchange.source.rsplit("/", 1)[-1] if exchange.source else ""
            row = candidate[_bfcl_id(item)]
            names = [c["function"]["name"] for c in message.get("tool_calls") or []]
            calls_match += names == [c.name for c in row.tool_calls]
    assert statuses == {200: 1700}
    assert calls_match == 1700


def _parses(arguments: str) -> bool:
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return True


def _bfcl_id(source_tail: str) -> str:
    """``gorilla_openfunctions_v1_test_rest_result.json#12`` → ``rest_12``."""
    name, _, row = source_tail.partition("#")
    category = name.removeprefix("gorilla_openfunctions_v1_test_").removesuffix("_result.json")
    return f"{category}_{row}"
