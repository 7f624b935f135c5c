"""Without the extras: tables read by the stdlib, and the message naming the missing extra.

Each check runs a fresh interpreter in which the extras' packages cannot be imported
(``sys.modules[name] = None``: ``import`` raises :class:`ModuleNotFoundError` and
:func:`importlib.util.find_spec` answers ``None``, as in the light install), so these are
fast stand-ins for the light venv of tests/packaging/test_light_install.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shadoweval.cli.extras import extra_for, missing_extra_message
from shadoweval.tables import TableMapping, load_recorded_rows
from tests.deploy.processes import REPO_ROOT, cli_env
from tests.packaging.light import HEAVY_PACKAGES

BLOCK = "import sys\nfor name in sys.argv[1].split(','):\n    sys.modules[name] = None\n"

LOAD_SCRIPT = (
    BLOCK
    + """
import dataclasses, json
from shadoweval.tables import TableMapping, load_recorded_rows
mapping = TableMapping.model_validate_json(sys.argv[3])
result = load_recorded_rows(sys.argv[2], mapping)
assert "pandas" not in sys.modules or sys.modules["pandas"] is None
print(json.dumps([dataclasses.asdict(r) for r in result.rows + result.rejected], default=str))
"""
)

CLI_SCRIPT = (
    BLOCK
    + """
from shadoweval.cli import app
app(sys.argv[2:], prog_name="shadow-eval")
"""
)


def _blocked_run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, ",".join(HEAVY_PACKAGES), *args],
        env=cli_env({"COLUMNS": "400"}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _tables(folder: Path) -> dict[str, Path]:
    rows = [
        {"id": "007", "prompt": "What is 2+2?", "output": "4", "task": "math", "ms": 120},
        {"id": "8", "prompt": "Say NA", "output": "NA", "task": "qa", "ms": 95.5},
        {"id": "9", "prompt": "Nothing", "output": None, "task": "qa", "ms": 80},
        {"id": "10", "prompt": "Quote, with a comma", "output": 'He said "hi", twice', "ms": 7},
    ]
    jsonl = folder / "t.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    array = folder / "t.json"
    array.write_text(json.dumps(rows), encoding="utf-8")
    csv_text = "id,prompt,output,task,ms\n007,What is 2+2?,4,math,120\n8,Say NA,NA,qa,95.5\n"
    csv_text += '9,Nothing,,qa,80\n10,"Quote, with a comma","He said ""hi"", twice",,7\n'
    csv = folder / "t.csv"
    csv.write_text(csv_text, encoding="utf-8")
    gz = folder / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(jsonl.read_bytes()))
    return {"jsonl": jsonl, "json": array, "csv": csv, "gz": gz}


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "gz"])
def test_tables_read_without_pandas_as_with_it(tmp_path: Path, kind: str) -> None:
    """JSON, JSON Lines and CSV give the same rows and rejected rows with and without pandas."""
    path = _tables(tmp_path)[kind]
    mapping = TableMapping(
        id_col="id", prompt_col="prompt", output_col="output", task_type_col="task",
        latency_col="ms", latency_unit="ms", task_type="default",
    )  # fmt: skip
    run = _blocked_run(LOAD_SCRIPT, str(path), mapping.model_dump_json())
    assert run.returncode == 0, run.stderr
    result = load_recorded_rows(path, mapping)
    with_pandas = [dataclasses.asdict(r) for r in result.rows + result.rejected]
    assert json.loads(run.stdout) == json.loads(json.dumps(with_pandas, default=str))
    assert len(result.rows) == 3
    assert [r.reason for r in result.rejected] == ["missing_output"]


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["compare", "run", "--run-id", "r1", "--database-url", "sqlite:///{db}"], "evaluate"),
        (["gate", "--run-id", "r1", "--database-url", "sqlite:///{db}"], "evaluate"),
        (["dashboard", "--database-url", "sqlite:///{db}", "--port", "1"], "dashboard"),
        (["mock-llm", "--input", "{parquet}", "--prompt-col", "p", "--output-col", "o"], "tables"),
    ],
)
def test_a_command_without_its_extra_names_it(tmp_path: Path, args: list[str], extra: str) -> None:
    parquet = tmp_path / "t.parquet"
    parquet.write_bytes(b"PAR1")
    argv = [a.format(db=tmp_path / "r.db", parquet=parquet) for a in args]
    run = _blocked_run(CLI_SCRIPT, *argv)
    command = " ".join(a for a in args[:2] if not a.startswith("-"))
    assert run.returncode == 3, run.stdout + run.stderr
    first = run.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: shadow-eval {command} needs the package '"), run.stderr
    assert f"which this install leaves out: pip install 'shadow-eval[{extra}]'" in first
    assert "Traceback" not in run.stderr


def test_extra_for_the_command_brings_the_package() -> None:
    assert extra_for("gate", "pandas") == "evaluate"  # one install is enough for gate
    assert extra_for("mock-llm", "pyarrow") == "tables"
    assert extra_for("import", "scipy") == "evaluate"
    assert extra_for("dashboard", "pandas") == "dashboard"
    assert extra_for("compare", "streamlit") == "dashboard"
    assert extra_for("compare", "no_such_package") is None


def test_a_module_no_extra_brings_is_no_extra_message() -> None:
    error = ModuleNotFoundError("No module named 'nowhere'", name="nowhere")
    assert missing_extra_message("shadow-eval compare run", error) is None
    error = ModuleNotFoundError("No module named 'scipy.stats'", name="scipy.stats")
    assert missing_extra_message("shadow-eval gate", error) == (
        "shadow-eval gate needs the package 'scipy', which this install leaves out: "
        "pip install 'shadow-eval[evaluate]' (No module named 'scipy.stats')"
    )
