"""Generate the demo workload: recorded tables for a baseline and a candidate model.

The workload has four task types, each a different kind of traffic an LLM service sees:

* ``support_chat`` — free-text answers; the candidate paraphrases the baseline.
* ``classification`` — one-word labels; the candidate agrees almost always.
* ``extraction`` — structured: the request asks for JSON matching a schema
  (``response_format: json_schema``). **Planted regression:** the candidate breaks the
  JSON in ``broken_json_share`` of answers (prose around a fence, or truncated output).
* ``summarization`` — long answers. **Planted regression:** the candidate's inter-token
  latency is ``slow_itl_factor`` × the baseline's on answers over ``long_answer_words``.

A second candidate, **better** (:func:`write_demo_tables`), gives the same answers without
the two planted regressions, served as fast as the baseline (its latency draws); where
the baseline answered badly — in
``baseline_defect_share`` of ``support_chat`` rows the baseline loops on one sentence
(degeneration) or refuses — both candidates answer properly. Every answer has a known
quality (1 good, 0 defective: a loop, a refusal, broken JSON), written as the judge key
that the demo's simulated judge (:mod:`shadoweval.simulation.mock_judge`) reads: an upgrade whose
answers *changed and got better*.

Rows carry a ``captured_at`` (ISO 8601, UTC) spread evenly over ``capture_span_hours``
from :data:`CAPTURE_START`, so the gate's observation window (a full daily cycle by
default) sees a day of traffic.

Everything is drawn from a seeded generator, so the same seed gives the same tables.
Latency columns (``ttft_ms``, ``itl_ms``) drive the mock-llm ``table`` latency profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from shadoweval.simulation.mock_llm.pieces import split_pieces

TASK_TYPES = ("support_chat", "classification", "extraction", "summarization")

PLANTED: tuple[tuple[str, str], ...] = (
    ("extraction", "format_parse"),
    ("summarization", "latency_e2e_ms_p50"),
)
"""(task type, check metric) pairs where the candidate carries a planted regression."""

DEMO_MAPPING: dict[str, str] = {
    "messages_col": "messages",
    "output_col": "output",
    "task_type_col": "task_type",
    "model_col": "model",
    "id_col": "id",
    "ttft_col": "ttft_ms",
    "itl_col": "itl_ms",
    "latency_unit": "ms",
    "prompt_tokens_col": "prompt_tokens",
    "completion_tokens_col": "completion_tokens",
    "request_fields_col": "request_fields",
    "captured_at_col": "captured_at",
}
"""Column mapping of the tables :func:`write_workload` writes (for
:class:`~shadoweval.tables.TableMapping`: the same for import and mock-llm)."""

CAPTURE_START = datetime(2026, 11, 2, tzinfo=UTC)
"""Capture time of the workload's first row; the others follow evenly over the span."""

REFUSAL_ANSWER = "I'm sorry, but I can't help with that request."
"""The baseline's refusal in a defective ``support_chat`` row."""

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}

_FIRST = [
    "Maria",
    "Kenji",
    "Amara",
    "Lukas",
    "Priya",
    "Omar",
    "Sofia",
    "Chen",
    "Elena",
    "Tomás",
    "Ingrid",
    "Kwame",
    "Yuki",
    "Fatima",
    "Jonas",
    "Aisha",
    "Mateo",
    "Hana",
    "Noah",
    "Leila",
]
_LAST = [
    "Lopez",
    "Tanaka",
    "Okafor",
    "Becker",
    "Sharma",
    "Haddad",
    "Rossi",
    "Wei",
    "Petrova",
    "García",
    "Larsen",
    "Mensah",
    "Sato",
    "Khan",
    "Weber",
    "Diallo",
    "Silva",
    "Kim",
]
_CITIES = [
    "Lisbon",
    "Osaka",
    "Lagos",
    "Munich",
    "Pune",
    "Beirut",
    "Turin",
    "Chengdu",
    "Sofia",
    "Valencia",
    "Bergen",
    "Accra",
    "Sapporo",
    "Lahore",
    "Zürich",
    "Dakar",
    "Recife",
    "Busan",
]
_PRODUCTS = [
    "router",
    "laptop",
    "headphones",
    "smart watch",
    "coffee machine",
    "e-reader",
    "printer",
    "phone",
    "vacuum robot",
    "camera",
    "monitor",
    "keyboard",
]
_ISSUES = [
    "will not turn on",
    "keeps disconnecting from Wi-Fi",
    "drains its battery overnight",
    "shows an error after the update",
    "makes a clicking noise",
    "is very slow to start",
    "does not charge",
    "lost all its settings",
]
_STEPS = [
    "First, unplug the {p} for thirty seconds and plug it back in.",
    "Check that the firmware of the {p} is up to date in the settings menu.",
    "Hold the reset button of the {p} for ten seconds to restore factory settings.",
    "Try a different power cable and outlet to rule out a power problem.",
    "Remove any recently installed accessories and test the {p} on its own.",
    "If the problem continues, contact support with the serial number of your {p}.",
    "Make sure the {p} is within range of your access point and not behind thick walls.",
    "Open the companion app and run the built-in diagnostic for the {p}.",
]
_PARAPHRASE = {
    "First,": "To begin,",
    "unplug": "disconnect",
    "check": "verify",
    "Check": "Verify",
    "Make sure": "Ensure",
    "Try": "Attempt",
    "problem": "issue",
    "contact": "reach out to",
    "recently": "newly",
    "restore": "reset to",
    "Open": "Launch",
    "thick": "heavy",
    "explains": "describes",
    "argues": "claims",
    "Critics": "Skeptics",
    "urged": "encouraged",
    "closes with": "ends on",
    "interviews": "talks to",
    "accelerating": "speeding up",
}
_TOPICS = [
    "renewable energy storage",
    "urban beekeeping",
    "the history of the printing press",
    "remote work policies",
    "ocean plastic cleanup",
    "sleep and memory",
    "electric bicycles in cities",
    "community gardens",
    "quantum computing basics",
    "water desalination",
    "the economics of streaming music",
    "volcanic soils",
]
_SUMMARY_SENTENCES = [
    "The article explains how {t} has changed over the last decade.",
    "It argues that costs have fallen faster than most experts predicted.",
    "Several case studies show both the benefits and the practical limits of {t}.",
    "Critics point out that the evidence is still uneven across regions.",
    "The author interviews researchers who describe open questions about {t}.",
    "Policy makers are urged to fund long-term studies before scaling up.",
    "A section on history traces the idea back to early experiments.",
    "The piece closes with a cautious but optimistic outlook for {t}.",
    "Local communities often adapt the approach to their own conditions.",
    "Data from public sources suggest adoption is accelerating.",
    "Some of the claims rely on small samples and need replication.",
    "The writer compares {t} with two older alternatives and finds clear trade-offs.",
]
_SENTIMENT_TEXT = {
    "positive": [
        "I love how quickly it arrived and it works perfectly.",
        "Fantastic quality, I would buy it again.",
        "The support team was friendly and solved everything.",
    ],
    "negative": [
        "It broke after two days and nobody answers my emails.",
        "Terrible battery life, very disappointed.",
        "The product looks nothing like the pictures.",
    ],
    "neutral": [
        "It arrived on Tuesday in a brown box.",
        "The manual is forty pages long.",
        "I have used it for a week so far.",
    ],
}


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Shape of the generated workload (counts per task type, planted regressions).

    ``baseline_defect_share``: share of ``support_chat`` rows where the baseline loops or
    refuses (0 by default; the demo uses 0.15). ``capture_span_hours``: the rows'
    capture times spread over this many hours. ``support_chat_factor``: ``support_chat``
    rows per row of each other task type (``per_task_type`` × this many; 1 by default, the
    demo's 2 makes support the busiest route, as it is in production traffic).
    ``baseline_loop_share``: of the defective baseline rows, the share that loop (the rest
    refuse).

    Raises:
        ValueError: ``per_task_type`` or ``support_chat_factor`` < 1.
    """

    per_task_type: int = 200
    seed: int = 7
    broken_json_share: float = 0.12
    long_answer_words: int = 120
    slow_itl_factor: float = 1.8
    ttft_ms_median: float = 40.0
    itl_ms_median: float = 3.0
    baseline_defect_share: float = 0.0
    capture_span_hours: float = 26.0
    support_chat_factor: int = 1
    baseline_loop_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("per_task_type", "support_chat_factor"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"WorkloadSpec.{name} = {value!r}: must be >= 1")

    def count(self, task_type: str) -> int:
        """The number of rows of ``task_type``."""
        factor = self.support_chat_factor if task_type == "support_chat" else 1
        return self.per_task_type * factor

    @property
    def total(self) -> int:
        """The number of rows of every task type."""
        return sum(self.count(t) for t in TASK_TYPES)


def _row_order(spec: WorkloadSpec) -> list[tuple[str, int]]:
    """(task type, index within it) in capture order: the task types interleaved round by
    round, ``support_chat`` ``support_chat_factor`` times per round, so every prefix has
    the traffic mix."""
    order: list[tuple[str, int]] = []
    for i in range(spec.per_task_type):
        for task in TASK_TYPES:
            factor = spec.support_chat_factor if task == "support_chat" else 1
            order.extend((task, i * factor + j) for j in range(factor))
    return order


def _paraphrase(text: str, rng: np.random.Generator, rate: float = 0.6) -> str:
    out = text
    for src, dst in _PARAPHRASE.items():
        if src in out and rng.random() < rate:
            out = out.replace(src, dst)
    return out


def _latency(rng: np.random.Generator, spec: WorkloadSpec) -> tuple[float, float]:
    ttft = float(spec.ttft_ms_median * np.exp(rng.normal(0.0, 0.25)))
    itl = float(spec.itl_ms_median * np.exp(rng.normal(0.0, 0.15)))
    return round(ttft, 3), round(itl, 3)


def _support(
    rng: np.random.Generator, defect_share: float, loop_share: float = 0.5
) -> tuple[list[dict[str, Any]], str, str, bool]:
    """A support question; the last value says whether the baseline's answer is defective."""
    product = str(rng.choice(_PRODUCTS))
    issue = str(rng.choice(_ISSUES))
    prompt = f"My {product} {issue}. What should I do? (ticket {int(rng.integers(10**5, 10**6))})"
    steps = rng.choice(len(_STEPS), size=int(rng.integers(3, 6)), replace=False)
    answer = " ".join(_STEPS[i].format(p=product) for i in steps)
    candidate = _paraphrase(answer, rng)
    if defect_share > 0 and rng.random() < defect_share:
        if rng.random() < loop_share:
            loop = _STEPS[int(steps[0])].format(p=product)
            return [{"role": "user", "content": prompt}], " ".join([loop] * 40), candidate, True
        return [{"role": "user", "content": prompt}], REFUSAL_ANSWER, candidate, True
    return [{"role": "user", "content": prompt}], answer, candidate, False


def _classification(rng: np.random.Generator) -> tuple[list[dict[str, Any]], str, str]:
    label = str(rng.choice(list(_SENTIMENT_TEXT)))
    text = str(rng.choice(_SENTIMENT_TEXT[label]))
    prompt = (
        "Classify the sentiment of this review as positive, negative or neutral. "
        f"Answer with one word.\nReview #{int(rng.integers(10**5, 10**6))}: {text}"
    )
    candidate = label if rng.random() > 0.02 else str(rng.choice(list(_SENTIMENT_TEXT)))
    return [{"role": "user", "content": prompt}], label, candidate


def _extraction(
    rng: np.random.Generator, broken_share: float
) -> tuple[list[dict[str, Any]], str, str]:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    age = int(rng.integers(18, 90))
    city = str(rng.choice(_CITIES))
    sentence = (
        f"{name}, aged {age}, moved to {city} last spring (record {int(rng.integers(10**6))})."
    )
    prompt = f"Extract name, age and city as JSON from: {sentence}"
    baseline = json.dumps({"name": name, "age": age, "city": city}, ensure_ascii=False)
    candidate = baseline
    if rng.random() < broken_share:
        if rng.random() < 0.5:
            candidate = f"Sure! Here is the JSON you asked for:\n```json\n{baseline}\n```"
        else:
            candidate = baseline[: max(5, len(baseline) - int(rng.integers(3, 12)))]
    return [{"role": "user", "content": prompt}], baseline, candidate


def _summarization(rng: np.random.Generator) -> tuple[list[dict[str, Any]], str, str]:
    topic = str(rng.choice(_TOPICS))
    n = int(rng.integers(6, 22))
    idx = rng.choice(len(_SUMMARY_SENTENCES), size=n, replace=True)
    answer = " ".join(_SUMMARY_SENTENCES[i].format(t=topic) for i in idx)
    prompt = (
        f"Summarize the attached article about {topic} in detail. (doc {int(rng.integers(10**6))})"
    )
    return [{"role": "user", "content": prompt}], answer, _paraphrase(answer, rng, 0.3)


@dataclass(frozen=True, slots=True)
class WorkloadRows:
    """The generated rows: one table per model, and the judge key.

    ``baseline``, ``candidate`` (the planted regressions) and ``better`` (the same prompts
    answered without them) are rows as :func:`generate_workload` documents; ``judge_key``
    maps each answer text of any table to its quality (1.0 good, 0.0 defective: a loop, a
    refusal, broken JSON), for :mod:`shadoweval.simulation.mock_judge`.
    """

    baseline: list[dict[str, Any]]
    candidate: list[dict[str, Any]]
    better: list[dict[str, Any]]
    judge_key: dict[str, float]


def _json_ok(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def generate_rows(spec: WorkloadSpec) -> WorkloadRows:
    """Generate every table of the workload (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    baseline: list[dict[str, Any]] = []
    candidate: list[dict[str, Any]] = []
    better: list[dict[str, Any]] = []
    judge_key: dict[str, float] = {}
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": EXTRACTION_SCHEMA, "strict": True},
    }
    step = timedelta(hours=spec.capture_span_hours) / max(1, spec.total - 1)
    for row, (task, i) in enumerate(_row_order(spec)):
        base_defect = False
        if task == "support_chat":
            messages, base_out, cand_out, base_defect = _support(
                rng, spec.baseline_defect_share, spec.baseline_loop_share
            )
        elif task == "classification":
            messages, base_out, cand_out = _classification(rng)
        elif task == "extraction":
            messages, base_out, cand_out = _extraction(rng, spec.broken_json_share)
        else:
            messages, base_out, cand_out = _summarization(rng)
        better_out = base_out if task == "extraction" else cand_out
        ttft_b, itl_b = _latency(rng, spec)
        ttft_c, itl_c = _latency(rng, spec)
        if len(cand_out.split()) > spec.long_answer_words:
            itl_c = round(itl_c * spec.slow_itl_factor, 3)
        judge_key.setdefault(base_out, 0.0 if base_defect else 1.0)
        judge_key.setdefault(better_out, 1.0)
        cand_ok = task != "extraction" or _json_ok(cand_out)
        judge_key[cand_out] = min(judge_key.get(cand_out, 1.0), 1.0 if cand_ok else 0.0)
        common = {
            "id": f"{task}-{i:05d}",
            "task_type": task,
            "messages": messages,
            "request_fields": (
                {"response_format": response_format} if task == "extraction" else None
            ),
            "prompt_tokens": len(split_pieces(str(messages[-1]["content"]))),
            "captured_at": (CAPTURE_START + row * step).isoformat(),
        }
        for rows, out, ttft, itl, model in (
            (baseline, base_out, ttft_b, itl_b, "demo-baseline-v1"),
            (candidate, cand_out, ttft_c, itl_c, "demo-candidate-v2"),
            (better, better_out, ttft_b, itl_b, "demo-candidate-v2b"),
        ):
            rows.append(
                {
                    **common,
                    "output": out,
                    "ttft_ms": ttft,
                    "itl_ms": itl,
                    "model": model,
                    "completion_tokens": len(split_pieces(out)),
                }
            )
    return WorkloadRows(baseline, candidate, better, judge_key)


def generate_workload(spec: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (baseline rows, candidate rows): same prompts, one output table per model.

    Each row: ``id``, ``task_type``, ``messages``, ``output``, ``request_fields`` (further
    request fields such as ``response_format``, or ``None``), ``ttft_ms``, ``itl_ms``,
    ``model``, ``prompt_tokens`` and ``completion_tokens`` (counted as mock-llm counts them),
    ``captured_at`` (ISO 8601, UTC). The candidate carries the planted regressions.
    """
    rows = generate_rows(spec)
    return rows.baseline, rows.candidate


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_workload(directory: Path, spec: WorkloadSpec) -> tuple[Path, Path]:
    """Write ``baseline.jsonl`` and ``candidate.jsonl`` into ``directory``; return paths."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = generate_rows(spec)
    return (
        _write_jsonl(directory / "baseline.jsonl", rows.baseline),
        _write_jsonl(directory / "candidate.jsonl", rows.candidate),
    )


@dataclass(frozen=True, slots=True)
class DemoTables:
    """Paths of the demo's tables: three models' answers and the simulated judge's key."""

    baseline: Path
    candidate: Path
    better: Path
    judge_key: Path


def write_demo_tables(directory: Path, spec: WorkloadSpec) -> DemoTables:
    """Write ``baseline.jsonl``, ``candidate.jsonl``, ``better.jsonl`` and
    ``judge_key.json`` (``{answer text: quality}``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = generate_rows(spec)
    key = directory / "judge_key.json"
    key.write_text(json.dumps(rows.judge_key, ensure_ascii=False), "utf-8")
    return DemoTables(
        baseline=_write_jsonl(directory / "baseline.jsonl", rows.baseline),
        candidate=_write_jsonl(directory / "candidate.jsonl", rows.candidate),
        better=_write_jsonl(directory / "better.jsonl", rows.better),
        judge_key=key,
    )
