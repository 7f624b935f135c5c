"""Loading recorded tables, with presets for the public benchmark files.

:func:`load_recorded_rows` reads one table file (or every table file of a directory) with
an explicit :class:`~shadoweval.tables.mapping.TableMapping`, or with a preset:

* ``alpaca_eval`` — AlpacaEval ``results/<model>/model_outputs.json`` (a JSON array):
  ``instruction`` → prompt, ``output`` → text, ``dataset`` → task type, ``generator`` →
  model. No id column: rows are keyed by prompt hash (identical across a model pair).
* ``mt_bench`` — first turns only. The outputs table is a FastChat answer file
  (``model_answer/<model>.jsonl``: ``question_id``, ``model_id``, ``choices[0].turns[0]``);
  the prompts table is ``question.jsonl`` (``question_id``, ``category`` → task type,
  ``turns[0]``), joined by ``question_id``. Default prompts file: ``question.jsonl`` in the
  answer file's folder or the one above it.
* ``bfcl`` — BFCL v1 result files
  (``result/<model>/gorilla_openfunctions_v1_test_<cat>_result.json``: ``id``,
  ``result`` (BFCL tool-call format, text, text parts, or — prompt mode — raw text with
  Hermes ``<tool_call>`` blocks, see :func:`~shadoweval.tables.values.output_cell`),
  ``latency`` seconds, ``input_token_count``, ``output_token_count``; models run in
  prompt mode record only ``id`` and ``result``: their latency and token counts are
  unknown, never zero, and :attr:`LoadResult.notes` says so per model) joined by ``id``
  with the question files
  (``data/gorilla_openfunctions_v1_test_<cat>.json``: ``id``, ``question``, ``function``).
  Either side may be a file or a directory; files pair by name (``<q>_result`` ↔ ``<q>``).
  Task type = the category ``<cat>``; model = the result file's folder name; tools are
  converted by :mod:`shadoweval.tables.bfcl_schema`. Default prompts: ``../../data``
  from the result folder.

A row of an outputs table without a matching prompt is rejected (``unmatched_id``), never
dropped; a duplicated join key in a prompts table is a :class:`TableMappingError`.

Trace presets (``kind = "trace"``: logs of live traffic, :mod:`shadoweval.tables.traces`):

* ``otel_genai`` — OpenTelemetry GenAI spans, OTLP/JSON (``resourceSpans``), both content
  conventions (content events, or ``gen_ai.input.messages``/``gen_ai.output.messages``);
* ``langfuse`` — Langfuse generations (API pages, trace exports, UI JSON/JSONL exports);
* ``litellm`` — LiteLLM ``StandardLoggingPayload`` JSON Lines.

They read JSON themselves (no column mapping), and an import redacts their rows with the
capture's body rules and tags their task type with the capture's rules.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from shadoweval.errors import TableMappingError
from shadoweval.tables.bfcl_schema import BfclLanguage
from shadoweval.tables.frames import RecordFrame, new_frame
from shadoweval.tables.mapping import TableMapping
from shadoweval.tables.reader import TableFormat, read_table, table_files
from shadoweval.tables.rows import LoadResult, require_columns, rows_from_frame
from shadoweval.tables.traces import load_langfuse, load_litellm, load_otel
from shadoweval.tables.values import to_python

if TYPE_CHECKING:
    import pandas as pd

Loader = Callable[[Path, Path | None, TableFormat | None], LoadResult]


@dataclass(frozen=True, slots=True)
class Preset:
    """A named way of reading a public benchmark's files.

    ``mapping`` is the column mapping applied to the outputs table (after the preset's
    join, if any; ``None`` for a trace preset, which reads JSON records itself);
    ``uses_prompts`` tells whether a separate prompts table is joined. ``kind`` is
    ``table`` (benchmark or exported outputs) or ``trace`` (logs of live traffic: an
    import redacts them as the capture sidecar would).
    """

    name: str
    description: str
    mapping: TableMapping | None
    uses_prompts: bool
    loader: Loader
    kind: Literal["table", "trace"] = "table"

    def load(
        self,
        path: str | Path,
        prompts: str | Path | None = None,
        format: TableFormat | None = None,
    ) -> LoadResult:
        """Read ``path`` (outputs: file or directory), joined with ``prompts`` if used."""
        if prompts is not None and not self.uses_prompts:
            raise TableMappingError(f"preset {self.name!r} does not take a prompts table")
        return self.loader(Path(path), None if prompts is None else Path(prompts), format)


def _load_mapped(mapping: TableMapping, path: Path, fmt: TableFormat | None) -> LoadResult:
    parts = [rows_from_frame(read_table(f, fmt), mapping, file=str(f)) for f in table_files(path)]
    return LoadResult.merge(parts)


# --------------------------------------------------------------------- alpaca_eval

ALPACA_EVAL_MAPPING = TableMapping(
    prompt_col="instruction",
    output_col="output",
    task_type_col="dataset",
    model_col="generator",
)


def _load_alpaca(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    return _load_mapped(ALPACA_EVAL_MAPPING, path, fmt)


# ------------------------------------------------------------------------ mt_bench

MT_BENCH_MAPPING = TableMapping(
    prompt_col="prompt",
    output_col="output",
    task_type_col="category",
    model_col="model_id",
    id_col="question_id",
)


def _first_turn(value: Any) -> Any:
    """``turns[0]`` of a list, else ``None`` (the row is then rejected by the mapping)."""
    value = to_python(value)
    return value[0] if isinstance(value, list) and value else None


def _answer_first_turn(value: Any) -> Any:
    """``choices[0].turns[0]`` of a FastChat answer, else ``None``."""
    value = to_python(value)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return _first_turn(value[0].get("turns"))
    return None


def _join_key(value: Any) -> str | None:
    value = to_python(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return None if value is None else str(value)


def _index_by(
    frame: pd.DataFrame | RecordFrame, column: str, file: str
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for record in frame.to_dict(orient="records"):
        key = _join_key(record.get(column))
        if key is None:
            continue
        if key in out:
            raise TableMappingError(f"join column {column!r} repeats {key!r} in {file}")
        out[key] = {str(k): v for k, v in record.items()}
    return out


def _default_mt_bench_prompts(path: Path) -> Path:
    base = path if path.is_dir() else path.parent
    for folder in (base, base.parent):
        candidate = folder / "question.jsonl"
        if candidate.is_file():
            return candidate
    raise TableMappingError(f"mt_bench needs a prompts table (question.jsonl) for {path}")


def _load_mt_bench(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    prompts = prompts or _default_mt_bench_prompts(path)
    questions = read_table(prompts, fmt)
    require_columns(
        questions,
        {"join key": "question_id", "prompt turns": "turns", "task type": "category"},
        str(prompts),
    )
    by_id = _index_by(questions, "question_id", str(prompts))
    parts = []
    for file in table_files(path):
        answers = read_table(file, fmt)
        require_columns(
            answers,
            {"join key": "question_id", "output turns": "choices", "model": "model_id"},
            str(file),
        )
        rows, unmatched = [], {}
        for position, record in enumerate(answers.to_dict(orient="records")):
            qid = _join_key(record.get("question_id"))
            question = by_id.get(qid) if qid is not None else None
            if question is None:
                unmatched[position] = ("unmatched_id", f"question_id {qid!r} not in {prompts}")
                question = {}
            rows.append(
                {
                    "question_id": record.get("question_id"),
                    "prompt": _first_turn(question.get("turns")),
                    "category": question.get("category"),
                    "output": _answer_first_turn(record.get("choices")),
                    "model_id": record.get("model_id"),
                }
            )
        frame = new_frame(rows, columns=list(MT_BENCH_MAPPING.mapped_columns().values()))
        parts.append(
            rows_from_frame(frame, MT_BENCH_MAPPING, file=str(file), pre_rejected=unmatched)
        )
    return LoadResult.merge(parts)


# ---------------------------------------------------------------------------- bfcl

BFCL_MAPPING = TableMapping(
    prompt_col="question",
    output_col="result",
    output_format="bfcl",
    id_col="id",
    latency_col="latency",
    latency_unit="s",
    prompt_tokens_col="input_token_count",
    completion_tokens_col="output_token_count",
    tools_col="function",
    tools_format="bfcl",
)

_RESULT_SUFFIX = "_result"


def bfcl_category(question_stem: str) -> str:
    """Category of a BFCL file stem: ``gorilla_openfunctions_v1_test_simple`` → ``simple``."""
    match = re.search(r"_test_(.+)$", question_stem)
    return match.group(1) if match else question_stem


def _language(category: str) -> BfclLanguage:
    if category == "java":
        return "java"
    if category == "javascript":
        return "javascript"
    return "python"


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def _default_bfcl_prompts(path: Path) -> Path:
    model_dir = path if path.is_dir() else path.parent
    candidate = model_dir.parent.parent / "data"
    if candidate.is_dir():
        return candidate
    raise TableMappingError(f"bfcl needs a prompts table (BFCL data folder) for {path}")


def _pair_bfcl(path: Path, prompts: Path) -> list[tuple[Path, Path]]:
    results = [f for f in table_files(path) if _stem(f).endswith(_RESULT_SUFFIX)]
    if path.is_file():
        results = [path]
    questions = {_stem(f): f for f in table_files(prompts)}
    if prompts.is_file() and len(results) == 1:
        return [(results[0], prompts)]
    pairs = []
    for result in results:
        wanted = _stem(result).removesuffix(_RESULT_SUFFIX)
        question = questions.get(wanted)
        if question is None:
            raise TableMappingError(
                f"no BFCL question file {wanted}.json in {prompts} for result file {result}"
            )
        pairs.append((result, question))
    if not pairs:
        raise TableMappingError(f"no BFCL result files (*{_RESULT_SUFFIX}.json) in {path}")
    return pairs


_BFCL_MEASUREMENTS = {
    "latency_col": "latency",
    "prompt_tokens_col": "input_token_count",
    "completion_tokens_col": "output_token_count",
}
"""The measurement columns of BFCL result files: models run in prompt mode (no native
tool calling) record none of them."""


def _bfcl_absent(columns: list[str]) -> dict[str, None]:
    """The mapping's measurement fields whose column a result file lacks (→ ``None``)."""
    return {field: None for field, column in _BFCL_MEASUREMENTS.items() if column not in columns}


def _bfcl_notes(absent: dict[str, dict[str, None]]) -> list[str]:
    """One note per model whose result files lack a measurement column: unknown, not 0."""
    notes = []
    for model, fields in absent.items():
        if "latency_col" in fields:
            notes.append(
                f"{model}: no latency column in its result files: latency unknown "
                "(not zero); its exchanges carry no timings and latency is not compared "
                "against them"
            )
        if "prompt_tokens_col" in fields or "completion_tokens_col" in fields:
            notes.append(
                f"{model}: no token counts (input_token_count, output_token_count) in its "
                "result files: token usage unknown"
            )
    return notes


def _join_bfcl(
    results: pd.DataFrame | RecordFrame, by_id: dict[str, dict[str, Any]], question_file: Path
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, str]]]:
    """Result records joined with their questions by ``id``; unmatched rows by position."""
    unmatched: dict[int, tuple[str, str]] = {}
    joined = []
    for position, record in enumerate(results.to_dict(orient="records")):
        key = _join_key(record.get("id"))
        question = by_id.get(key) if key is not None else None
        if question is None:
            unmatched[position] = ("unmatched_id", f"id {key!r} not in {question_file}")
            question = {}
        joined.append(
            {
                **{str(k): v for k, v in record.items()},
                "question": question.get("question"),
                "function": question.get("function"),
            }
        )
    return joined, unmatched


def _load_bfcl(path: Path, prompts: Path | None, fmt: TableFormat | None) -> LoadResult:
    prompts = prompts or _default_bfcl_prompts(path)
    parts = []
    absent: dict[str, dict[str, None]] = {}
    for result_file, question_file in _pair_bfcl(path, prompts):
        category = bfcl_category(_stem(question_file))
        results = read_table(result_file, fmt)
        questions = read_table(question_file, fmt)
        require_columns(results, {"join key": "id", "output": "result"}, str(result_file))
        require_columns(
            questions,
            {"join key": "id", "prompt": "question", "tools": "function"},
            str(question_file),
        )
        by_id = _index_by(questions, "id", str(question_file))
        joined, unmatched = _join_bfcl(results, by_id, question_file)
        model = result_file.parent.name
        missing = _bfcl_absent([str(c) for c in results.columns])
        if missing:
            absent.setdefault(model, {}).update(missing)
        mapping = BFCL_MAPPING.model_copy(
            update={
                "task_type": category,
                "model": model,
                "tools_language": _language(category),
                **missing,
            }
        )
        frame = new_frame(joined)
        parts.append(rows_from_frame(frame, mapping, file=str(result_file), pre_rejected=unmatched))
    merged = LoadResult.merge(parts)
    return dataclasses.replace(merged, notes=merged.notes + _bfcl_notes(absent))


# ------------------------------------------------------------------------- registry


def _trace_preset(name: str, description: str, loader: Loader) -> Preset:
    """A preset of live-traffic logs: no column mapping, no prompts table, and an import
    redacts its records as the capture sidecar would (``kind="trace"``)."""
    return Preset(name, description, None, uses_prompts=False, loader=loader, kind="trace")


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "alpaca_eval",
            "AlpacaEval model_outputs.json: instruction, output, dataset, generator",
            ALPACA_EVAL_MAPPING,
            uses_prompts=False,
            loader=_load_alpaca,
        ),
        Preset(
            "mt_bench",
            "MT-Bench first turns: model_answer/<model>.jsonl joined with question.jsonl",
            MT_BENCH_MAPPING,
            uses_prompts=True,
            loader=_load_mt_bench,
        ),
        Preset(
            "bfcl",
            "BFCL v1 results (result/<model>/) joined with questions (data/) by id",
            BFCL_MAPPING,
            uses_prompts=True,
            loader=_load_bfcl,
        ),
        _trace_preset(
            "otel_genai",
            "OpenTelemetry GenAI chat spans, OTLP/JSON (resourceSpans), one export per file "
            "or per line",
            load_otel,
        ),
        _trace_preset(
            "langfuse",
            "Langfuse GENERATION observations (API pages, traces, UI JSON/JSONL export)",
            load_langfuse,
        ),
        _trace_preset(
            "litellm",
            "LiteLLM StandardLoggingPayload JSON Lines (callbacks, spend logs)",
            load_litellm,
        ),
    )
}
"""The built-in presets, by name."""


def preset(name: str) -> Preset:
    """Return the preset called ``name``.

    Raises:
        TableMappingError: unknown name (the message lists the known ones).
    """
    return _preset(name)


def _preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise TableMappingError(
            f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}"
        ) from None


def load_recorded_rows(
    path: str | Path,
    mapping: TableMapping | None = None,
    *,
    preset: str | Preset | None = None,
    prompts: str | Path | None = None,
    format: TableFormat | None = None,
) -> LoadResult:
    """Read a recorded table (file or directory of files) into :class:`RecordedRow` s.

    Give exactly one of ``mapping`` (explicit columns) or ``preset`` (a name in
    :data:`PRESETS` or a :class:`Preset`). ``prompts`` is the join table of presets that
    use one (``mt_bench``, ``bfcl``).

    Returns:
        :class:`LoadResult` with ``.rows`` (in file order) and ``.rejected`` (each with
        location, reason and the raw row).

    Raises:
        TableMappingError: a mapped column is missing (the message names the column, the
            file and the columns that exist), an unknown preset, or a bad combination.
        FileNotFoundError: no table at ``path``.
        RecordDecodeError: a file that cannot be parsed.
    """
    if (mapping is None) == (preset is None):
        raise TableMappingError("give exactly one of a mapping or a preset")
    if preset is not None:
        chosen = _preset(preset) if isinstance(preset, str) else preset
        return chosen.load(path, prompts, format)
    assert mapping is not None
    if prompts is not None:
        raise TableMappingError("a prompts table is only joined by the mt_bench and bfcl presets")
    return _load_mapped(mapping, Path(path), format)
