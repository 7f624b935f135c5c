"""The canary check of the capture work, on exports: a secret key and an e-mail address
planted in requests, answers and tool calls are in no exported byte — CLI files, API
zips, in every format — and the manifest counts their redactions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from shadoweval.api import create_app
from shadoweval.application.redaction import body_redaction
from shadoweval.cli import app as cli_app
from shadoweval.export import ExportRedaction, build_export, export_archive, make_request
from shadoweval.records import Verdict
from shadoweval.storage import Database, Repository, RunInfo
from tests.export.readback import unzip
from tests.export.seed import CANARY, EMAIL, RUN_ID, seed_database

FORMATS = ("csv", "jsonl", "parquet")
TOKEN = "canary-test-token-" + "y" * 16
NEEDLES = (CANARY.encode(), EMAIL.encode(), b"CANARY0123456789abcdef")


def leaks(name: str, data: bytes) -> list[str]:
    """Where a needle shows: in the raw bytes, or in any decoded Parquet cell."""
    found = [f"{name}: raw bytes hold {n!r}" for n in NEEDLES if n in data]
    if name.endswith(".parquet"):
        cells = json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str)
        found += [f"{name}: a cell holds {n!r}" for n in NEEDLES if n.decode() in cells]
    return found


def archive_leaks(archive: bytes) -> list[str]:
    found = [f"zip: raw bytes hold {n!r}" for n in NEEDLES if n in archive]
    for name, data in unzip(archive).items():
        found += leaks(name, data)
    return found


@pytest.fixture
def canary_url(empty_url: str) -> str:
    seeded = seed_database(empty_url, canary=True)
    assert any(s.similarity is None for s in seeded.scores)
    return empty_url


def never(repository: Repository, run: RunInfo) -> Verdict:
    raise AssertionError("the export endpoint must not gate")


def test_no_canary_in_cli_exports(canary_url: str, tmp_path: Path) -> None:
    for fmt in FORMATS:
        out = tmp_path / fmt
        result = CliRunner().invoke(
            cli_app,
            ["export", "--run", RUN_ID, "--out", str(out), "--format", fmt,
             "--per-task-type", "100", "--database-url", canary_url],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert CANARY not in result.output
        assert EMAIL not in result.output
        written = sorted(out.iterdir())
        assert [p.name for p in written] == ["manifest.json", f"samples.{fmt}"]
        for path in written:
            assert leaks(path.name, path.read_bytes()) == []
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["total"]["exported"] == 22
        counts = manifest["redaction"]["counts"]
        # per pair: system + user message, baseline text, its tool call, candidate text
        # (unless errored) and every other candidate's tool call each hold both needles
        assert counts["secret_key"] >= 22 * 4
        assert counts["email"] == counts["secret_key"]
        assert set(manifest["redaction"]["rules"]) == {"secret_field", "secret_key", "email",
                                                       "card_number", "phone"}  # fmt: skip


@pytest.mark.anyio
async def test_no_canary_in_api_exports(canary_url: str) -> None:
    with Database(canary_url) as db:
        api = create_app(
            Repository(db),
            token=SecretStr(TOKEN),
            compute_verdict=never,
            export_redaction=body_redaction(),
        )
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            for fmt in FORMATS:
                response = await client.get(
                    f"/v1/runs/{RUN_ID}/export",
                    params={"format": fmt, "per_task_type": 100},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                assert response.status_code == 200, response.text
                assert archive_leaks(response.content) == []
                manifest = json.loads(unzip(response.content)["manifest.json"])
                assert manifest["redaction"]["counts"]["secret_key"] >= 22 * 4
                assert manifest["redaction"]["counts"]["email"] >= 22 * 4


def test_the_search_finds_the_canary_when_nothing_redacts(canary_url: str) -> None:
    """Control: without redaction the same search finds both needles in every format."""
    with Database(canary_url) as db:
        repo = Repository(db)
        for fmt in FORMATS:
            result = build_export(
                repo,
                make_request(RUN_ID, fmt=fmt),
                redact=ExportRedaction(redact=lambda text: text, rules=()),
            )
            found = " ".join(archive_leaks(export_archive(result)))
            assert CANARY in found
            assert EMAIL in found
