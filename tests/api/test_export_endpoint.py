"""``GET /v1/runs/{run_id}/export``: the CLI's export as a zip, over SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from shadoweval.api import create_app
from shadoweval.api.app import API_COMMAND
from shadoweval.application.gating import gate_run
from shadoweval.application.redaction import body_redaction
from shadoweval.export import build_export, make_request
from shadoweval.pair_flags import PairFlag
from shadoweval.records import Verdict
from shadoweval.storage import Database, Repository, RunInfo
from tests.export.changed import judge_pairs
from tests.export.readback import decoded, expected_rows, records, unzip
from tests.export.seed import POLICY_HASH, RUN_ID, TASK_TYPES, Seeded, seed_database

from .conftest import TOKEN

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def compute(repository: Repository, run: RunInfo) -> Verdict:
    return gate_run(repository, run, command=API_COMMAND).verdict


@pytest.fixture
def export_repo(empty_url: str) -> Iterator[Repository]:
    seed_database(empty_url)
    with Database(empty_url) as db:
        yield Repository(db)


@pytest.fixture
def export_app(export_repo: Repository) -> Starlette:
    """The API with the export redactor the CLI builds."""
    return create_app(
        export_repo,
        token=SecretStr(TOKEN),
        compute_verdict=compute,
        export_redaction=body_redaction(),
    )


async def get(
    app: Starlette, path: str, params: Any = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.get(path, params=params, headers=AUTH if headers is None else headers)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
async def test_export_is_a_zip_of_samples_and_manifest(
    export_app: Starlette, export_repo: Repository, fmt: str
) -> None:
    params = [
        ("format", fmt),
        ("per_task_type", "3"),
        ("order", "random"),
        ("seed", "9"),
        ("max_similarity", "0.95"),
        ("task_type", "chat"),
        ("task_type", "extract"),
    ]
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="shadow-eval-export-{RUN_ID}.zip"'
    )
    assert response.headers["cache-control"] == "no-store"
    members = unzip(response.content)
    assert sorted(members) == ["manifest.json", f"samples.{fmt}"]
    manifest = json.loads(members["manifest.json"])
    assert manifest["run_id"] == RUN_ID
    assert manifest["policy_hash"] == POLICY_HASH
    assert manifest["seed"] == 9
    assert manifest["order"] == "random"
    assert manifest["filters"]["task_types"] == ["chat", "extract"]
    assert manifest["filters"]["max_similarity"] == 0.95
    # the same rows as the library (and so the CLI) builds for the same request
    same = build_export(
        export_repo,
        make_request(
            RUN_ID,
            per_task_type=3,
            order="random",
            seed=9,
            fmt=fmt,
            max_similarity=0.95,
            task_types=["chat", "extract"],
        ),
        redact=body_redaction(),
    )
    rows = records(f"samples.{fmt}", members[f"samples.{fmt}"])
    assert [r["exchange_id"] for r in rows] == list(same.rows["exchange_id"])
    assert manifest["counts"] == same.manifest["counts"]
    samples = export_repo.samples_by_ids(RUN_ID, [r["exchange_id"] for r in rows])
    assert [decoded(r) for r in rows] == expected_rows(f"samples.{fmt}", samples)


async def test_defaults_are_csv_lowest_twenty(export_app: Starlette) -> None:
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export")
    assert response.status_code == 200
    manifest = json.loads(unzip(response.content)["manifest.json"])
    assert (manifest["format"], manifest["order"], manifest["per_task_type"]) == (
        "csv", "lowest", 20,
    )  # fmt: skip
    assert manifest["total"]["exported"] == sum(min(n, 20) for n in TASK_TYPES.values())


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"per_task_type": "0"}, "per_task_type 0"),
        ({"per_task_type": "lots"}, "per_task_type 'lots'"),
        ({"per_task_type": "10001"}, "per_task_type 10001"),
        ({"per_task_type": "100000000000000000000"}, "per_task_type 100000000000000000000"),
        (
            {"order": "random", "seed": "99999999999999999999999"},
            "seed 99999999999999999999999 must be an integer from 0 to 2**63 - 1",
        ),
        ({"order": "random", "seed": "18446744073709551616"}, "seed 18446744073709551616"),
        ({"order": "random", "seed": "9223372036854775808"}, "seed 9223372036854775808"),
        ({"order": "random", "seed": "-1"}, "seed -1"),
        ({"seed": "5"}, "seed only applies to order random"),
        ({"seed": "5", "order": "lowest"}, "seed only applies to order random"),
        ({"order": "best"}, "order 'best'"),
        ({"order": "random"}, "order random needs seed"),
        ({"seed": "x", "order": "random"}, "seed 'x'"),
        ({"format": "xlsx"}, "format 'xlsx'"),
        ({"flag": "leaky"}, "flag 'leaky'"),
        ({"min_similarity": "2"}, "min_similarity 2.0"),
        ({"max_similarity": "nan"}, "max_similarity 'nan'"),
        ({"min_similarity": "0.9", "max_similarity": "0.1"}, "min_similarity 0.9"),
        ({"task_type": "poetry"}, "task_type 'poetry'"),
        ({"per-task-type": "3"}, "unknown query parameter 'per-task-type'"),
        ([("seed", "1"), ("seed", "2")], "seed is given 2 times"),
        ({"changed_unjudged": "maybe"}, "changed_unjudged 'maybe' is not true or false"),
        ([("changed_unjudged", "1"), ("changed_unjudged", "0")], "changed_unjudged is given 2"),
        ({"raw_cells": "yes"}, "raw_cells 'yes' is not true or false"),
    ],
)
async def test_bad_parameters_are_400_naming_parameter_and_value(
    export_app: Starlette, params: Any, named: str
) -> None:
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "bad_request"
    assert named in body["detail"]


async def test_the_largest_seed_is_accepted(export_app: Starlette) -> None:
    params = {"order": "random", "seed": str(2**63 - 1), "per_task_type": "10000"}
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 200, response.text
    manifest = json.loads(unzip(response.content)["manifest.json"])
    assert manifest["seed"] == 2**63 - 1


async def test_unknown_run_is_404_and_no_token_is_401(export_app: Starlette) -> None:
    missing = await get(export_app, "/v1/runs/ghost/export")
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "detail": "run 'ghost' not found"}
    anonymous = await get(export_app, f"/v1/runs/{RUN_ID}/export", headers={})
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")


async def test_without_a_redactor_the_export_is_refused(export_repo: Repository) -> None:
    app = create_app(export_repo, token=SecretStr(TOKEN), compute_verdict=compute)
    response = await get(app, f"/v1/runs/{RUN_ID}/export")
    assert response.status_code == 503
    assert response.json()["error"] == "export_unavailable"


async def test_the_openapi_document_describes_the_endpoint(export_app: Starlette) -> None:
    document = (await get(export_app, "/openapi.json")).json()
    operation = document["paths"]["/v1/runs/{run_id}/export"]["get"]
    assert operation["operationId"] == "exportSamples"
    params = {p["name"]: p for p in operation["parameters"]}
    assert set(params) == {
        "run_id", "per_task_type", "order", "seed", "format", "task_type", "flag",
        "min_similarity", "max_similarity", "changed_unjudged", "raw_cells", "fraction",
        "ppi_sample",
    }  # fmt: skip
    assert params["changed_unjudged"]["schema"] == {"type": "boolean", "default": False}
    assert params["raw_cells"]["schema"] == {"type": "boolean", "default": False}
    assert params["format"]["schema"]["enum"] == ["csv", "jsonl", "parquet"]
    assert params["flag"]["schema"]["items"]["enum"] == [f.value for f in PairFlag]
    assert params["task_type"]["explode"] is True
    assert set(operation["responses"]) == {"200", "400", "401", "404", "503"}
    assert "application/zip" in operation["responses"]["200"]["content"]
    for param in params.values():
        jsonschema.Draft202012Validator.check_schema(param["schema"])
    # error answers validate against the schema the document declares
    for path, status in ((f"/v1/runs/{RUN_ID}/export?order=best", 400),
                         ("/v1/runs/ghost/export", 404)):  # fmt: skip
        response = await get(export_app, path)
        assert response.status_code == status
        schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
        root = {"$ref": "#/x", "x": schema, "components": document["components"]}
        jsonschema.Draft202012Validator(root).validate(response.json())


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
async def test_changed_unjudged_exports_the_pairs_left_to_judge(
    export_app: Starlette, export_repo: Repository, value: str
) -> None:
    run = export_repo.get_run(RUN_ID)
    assert run is not None
    expected = judge_pairs(export_repo, Seeded(run, export_repo.load_pair_scores(RUN_ID)))
    params = {"changed_unjudged": value, "per_task_type": "100", "format": "jsonl"}
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 200, response.text
    members = unzip(response.content)
    rows = records("samples.jsonl", members["samples.jsonl"])
    assert {r["exchange_id"] for r in rows} == expected
    manifest = json.loads(members["manifest.json"])
    assert manifest["filters"]["changed_unjudged"] is True
    assert manifest["filters"]["exchange_ids"] == len(expected)
    every = await get(export_app, f"/v1/runs/{RUN_ID}/export", {"changed_unjudged": "false"})
    assert json.loads(unzip(every.content)["manifest.json"])["filters"]["changed_unjudged"] is False


FORMULA = "=SUM(A1:A2) starts like a formula"
"""A candidate answer of the seeded run (tests.export.seed.TRICKY)."""


@pytest.mark.parametrize(("raw", "cell", "mode"), [(None, "'" + FORMULA, "formula_escaped"),
                                                   ("false", "'" + FORMULA, "formula_escaped"),
                                                   ("true", FORMULA, "raw")])  # fmt: skip
async def test_formula_cells_are_escaped_unless_raw_cells(
    export_app: Starlette, raw: str | None, cell: str, mode: str
) -> None:
    params = {"per_task_type": "20"} | ({} if raw is None else {"raw_cells": raw})
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 200
    members = unzip(response.content)
    rows = records("samples.csv", members["samples.csv"])
    assert cell in {r["candidate_text"] for r in rows}
    assert json.loads(members["manifest.json"])["cells"] == mode


async def test_the_random_label_sample_over_the_api(
    export_app: Starlette, export_repo: Repository
) -> None:
    run = export_repo.get_run(RUN_ID)
    assert run is not None
    judge_pairs(export_repo, Seeded(run, export_repo.load_pair_scores(RUN_ID)))
    params = {"ppi_sample": "true", "fraction": "1", "seed": "4", "format": "jsonl"}
    response = await get(export_app, f"/v1/runs/{RUN_ID}/export", params)
    assert response.status_code == 200, response.text
    members = unzip(response.content)
    rows = records("samples.jsonl", members["samples.jsonl"])
    manifest = json.loads(members["manifest.json"])
    sample = manifest["ppi_sample"]
    assert sample["id"] == "ppi-seed-4-fraction-1.0"
    assert sample["exchange_ids"] == sorted(r["exchange_id"] for r in rows)
    assert len(rows) == sum(TASK_TYPES.values()) - 3  # every changed pair, judged or not
    drawn = await get(export_app, f"/v1/runs/{RUN_ID}/export", {"ppi_sample": "1"})
    assert drawn.status_code == 200, drawn.text
    seeded = json.loads(unzip(drawn.content)["manifest.json"])
    assert seeded["ppi_sample"]["id"] == f"ppi-seed-{seeded['seed']}-n-20"
    for bad, named in (
        ({"order": "lowest"}, "ppi_sample cannot be combined with order lowest"),
        ({"max_similarity": "0.5"}, "ppi_sample cannot be combined with max_similarity 0.5"),
        ({"fraction": "0.1", "per_task_type": "3"}, "fraction 0.1 and per_task_type 3"),
    ):
        refused = await get(export_app, f"/v1/runs/{RUN_ID}/export", {"ppi_sample": "1", **bad})
        assert refused.status_code == 400
        assert named in refused.json()["detail"]
