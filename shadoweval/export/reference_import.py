"""Reference correctness: a ground-truth checker's per-item pass/fail for each side of a pair.

Preset ``bfcl``: the Berkeley Function Calling Leaderboard's official score files,
``score/<model>/<category>_score.json`` (format in ``../shared/data/README.md`` §2). They
are JSON Lines although named ``.json``: line 1 is the category's summary
(``accuracy``, ``correct_count``, ``total_count``); every further line is one **failed**
item, its ``id`` the item's **1-based** position in the category (``simple`` item
``id: 14`` is ``simple_13``). An item is a pass unless it is listed. Each file is checked
on reading: a summary with the three fields, integer ids in ``1..total_count`` without
repeats, ``total_count − failures == correct_count``, and — where a failure line carries
the question (``prompt.id``) — that it is ``<category>_<id − 1>``; a file that fails a
check is refused naming the file, the line and the value. Numbers beyond a double or a
64-bit integer (a failed item's ``execution_result`` holding 1000!) are read exactly, as
text (:func:`~shadoweval.tables.json_numbers.loads_keeping_numbers`), never a refusal.

Pairs are matched to items by the exchange's origin: the ``bfcl`` table import
(:mod:`shadoweval.tables.presets`, :mod:`shadoweval.capture.table_import`) records each exchange's
``source`` as ``import:<result file>#<row>``, with the 0-based row of BFCL's result file
``gorilla_openfunctions_v1_test_<category>_result.json``. Rows are in BFCL id order (the
data README: "the id sequence is identical in the question file and both models' result
files"), so row ``r`` of category ``c`` is BFCL item ``c_r`` — the item the score files'
``id`` ``r + 1`` names. :func:`bfcl_item` reads that.

For each matched pair :func:`reference_judgements` gives a
:class:`~shadoweval.records.PairJudgement` of source ``reference``, checker
:data:`BFCL_CHECKER`: ``candidate_better`` when only the candidate passes,
``candidate_worse`` when only the baseline passes, else ``tie``. Nothing is dropped
silently: pairs of the run without a BFCL origin, pairs whose category has no score file,
and score-file items with no pair in the run are counted per category
(:class:`ReferenceImport`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from shadoweval.errors import ConfigError, RecordDecodeError
from shadoweval.records import JudgementSource, PairJudgement, QualityOutcome
from shadoweval.tables import bfcl_category
from shadoweval.tables.json_numbers import loads_keeping_numbers

__all__ = [
    "BFCL_CHECKER",
    "REFERENCE_PRESETS",
    "CategoryScore",
    "CategoryTally",
    "ReferenceImport",
    "ReferencePair",
    "bfcl_item",
    "read_bfcl_scores",
    "reference_judgements",
    "reference_outcome",
]

BFCL_CHECKER = "bfcl-official-score"
"""``PairJudgement.checker`` of judgements read from BFCL's official score files."""

REFERENCE_PRESETS: tuple[str, ...] = ("bfcl",)
"""Reference formats ``labels import-reference`` reads."""

_SCORE_SUFFIX = "_score.json"
_RESULT_SUFFIX = "_result"
_SOURCE = re.compile(r"^import:(?P<file>.+)#(?P<row>\d+)$")


@dataclass(frozen=True, slots=True)
class CategoryScore:
    """One BFCL score file: the official summary and the failed items.

    Attributes:
        category: e.g. ``simple``, ``rest``.
        accuracy, correct_count, total_count: line 1 of the file.
        failed: 0-based position → the checker's ``error_type`` of each failed item.
        path: the file read.
    """

    category: str
    accuracy: float
    correct_count: int
    total_count: int
    failed: dict[int, str]
    path: str

    def passed(self, position: int) -> bool:
        """True when item ``position`` (0-based) passed: it is not listed as failed.

        Raises:
            ValueError: ``position`` is outside ``0 … total_count − 1``.
        """
        if not 0 <= position < self.total_count:
            raise ValueError(
                f"BFCL {self.category} has {self.total_count} items; position {position} "
                "is not one of them"
            )
        return position not in self.failed


def _fail(path: Path, line: int, message: str) -> RecordDecodeError:
    return RecordDecodeError(
        f"{path}:{line}: {message}", location=f"{path}:{line}", reason="bad_score_file"
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_score_file(path: Path) -> CategoryScore:
    category = path.name.removesuffix(_SCORE_SUFFIX)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read BFCL score file {path}: {exc}", field="scores") from exc
    records: list[tuple[int, object]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            records.append((number, loads_keeping_numbers(raw)))
        except ValueError as exc:
            raise _fail(path, number, f"not JSON: {exc}") from None
    if not records:
        raise _fail(path, 1, "empty score file (line 1 must be the summary)")
    number, head = records[0]
    if not isinstance(head, dict):
        raise _fail(path, number, "line 1 is not a JSON object")
    total, correct = _count(head.get("total_count")), _count(head.get("correct_count"))
    accuracy = head.get("accuracy")
    if total is None or correct is None or not isinstance(accuracy, int | float):
        raise _fail(
            path,
            number,
            "line 1 must hold accuracy, correct_count and total_count, got "
            f"{sorted(head) if isinstance(head, dict) else head!r}",
        )
    failed: dict[int, str] = {}
    for number, record in records[1:]:
        if not isinstance(record, dict):
            raise _fail(path, number, "a failure line is not a JSON object")
        item = _count(record.get("id"))
        if item is None or not 1 <= item <= total:
            raise _fail(path, number, f"id {record.get('id')!r} is not an item in 1..{total}")
        position = item - 1
        if position in failed:
            raise _fail(path, number, f"id {item} is listed twice")
        prompt = record.get("prompt")
        if isinstance(prompt, dict) and "id" in prompt:
            expected = f"{category}_{position}"
            if prompt["id"] != expected:
                raise _fail(
                    path,
                    number,
                    f"id {item} (1-based) should be item {expected!r}, but its prompt is "
                    f"{prompt['id']!r}",
                )
        failed[position] = str(record.get("error_type") or "failed")
    if total - len(failed) != correct:
        raise _fail(
            path,
            1,
            f"correct_count {correct} does not match total_count {total} minus "
            f"{len(failed)} failure lines",
        )
    if not math.isclose(float(accuracy), correct / total if total else 0.0, abs_tol=1e-9):
        raise _fail(path, 1, f"accuracy {accuracy} is not correct_count / total_count")
    return CategoryScore(
        category=category,
        accuracy=float(accuracy),
        correct_count=correct,
        total_count=total,
        failed=failed,
        path=str(path),
    )


def read_bfcl_scores(directory: str | Path) -> dict[str, CategoryScore]:
    """Read every ``<category>_score.json`` of one model's BFCL score folder.

    Args:
        directory: e.g. ``../shared/data/bfcl/score/gpt-4o-2024-05-13-FC`` (a single
            score file is accepted too).

    Returns:
        category → :class:`CategoryScore`.

    Raises:
        ConfigError: the folder does not exist or holds no ``*_score.json`` file.
        RecordDecodeError: a file fails a check (module docstring); the message names the
            file, the line and the value.
    """
    path = Path(directory)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob(f"*{_SCORE_SUFFIX}"))
    else:
        raise ConfigError(f"BFCL score folder {str(path)!r} does not exist", field="scores")
    if not files:
        raise ConfigError(
            f"no BFCL score files (*{_SCORE_SUFFIX}) in {str(path)!r}", field="scores"
        )
    scores = [_read_score_file(file) for file in files]
    return {score.category: score for score in scores}


def bfcl_item(source: str | None) -> tuple[str, int] | None:
    """``(category, 0-based position)`` of an exchange imported from a BFCL result file.

    ``source`` is ``Exchange.source``:
    ``import:<…>/gorilla_openfunctions_v1_test_rest_result.json#12`` → ``("rest", 12)``
    (BFCL item ``rest_12``). ``None`` for any other origin.
    """
    if source is None:
        return None
    match = _SOURCE.match(source)
    if match is None:
        return None
    name = PurePath(match.group("file")).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    if not name.endswith(_RESULT_SUFFIX) or "_test_" not in name:
        return None
    return bfcl_category(name.removesuffix(_RESULT_SUFFIX)), int(match.group("row"))


def reference_outcome(baseline_pass: bool, candidate_pass: bool) -> QualityOutcome:
    """Better when only the candidate passes, worse when only the baseline does, else tie."""
    if candidate_pass and not baseline_pass:
        return QualityOutcome.CANDIDATE_BETTER
    if baseline_pass and not candidate_pass:
        return QualityOutcome.CANDIDATE_WORSE
    return QualityOutcome.TIE


@dataclass(frozen=True, slots=True)
class ReferencePair:
    """A scored pair of the run and where its exchange came from (``Exchange.source``)."""

    exchange_id: str
    task_type: str
    source: str | None


@dataclass
class CategoryTally:
    """One BFCL category of an import.

    Attributes:
        category: the category.
        items: items in the score files (``total_count``).
        matched: pairs of the run matched to an item (each becomes a judgement).
        not_in_run: items with no pair in the run.
        better, worse, tie: outcomes of the matched pairs.
        baseline_accuracy, candidate_accuracy: the official accuracies (line 1).
        baseline_pass_matched, candidate_pass_matched: passes among the matched items.
    """

    category: str
    items: int = 0
    matched: int = 0
    not_in_run: int = 0
    better: int = 0
    worse: int = 0
    tie: int = 0
    baseline_accuracy: float = math.nan
    candidate_accuracy: float = math.nan
    baseline_pass_matched: int = 0
    candidate_pass_matched: int = 0


@dataclass
class ReferenceImport:
    """What a reference import found.

    Attributes:
        judgements: one ``reference`` judgement per matched pair.
        categories: category → :class:`CategoryTally` (every category of either side's
            score files).
        pairs: scored pairs of the run.
        pairs_without_item: pairs whose exchange did not come from a BFCL result file.
        pairs_without_scores: category → pairs of a category that has no score file on
            one side (they are not judged).
        pairs_out_of_range: pairs whose row is beyond the category's ``total_count``.
    """

    judgements: list[PairJudgement] = field(default_factory=list)
    categories: dict[str, CategoryTally] = field(default_factory=dict)
    pairs: int = 0
    pairs_without_item: int = 0
    pairs_without_scores: dict[str, int] = field(default_factory=dict)
    pairs_out_of_range: int = 0


def _side(passed: bool, score: CategoryScore, position: int) -> str:
    return "pass" if passed else f"fail ({score.failed[position]})"


def reference_judgements(
    pairs: Sequence[ReferencePair] | Iterable[ReferencePair],
    *,
    run_id: str,
    baseline: dict[str, CategoryScore],
    candidate: dict[str, CategoryScore],
) -> ReferenceImport:
    """Judge each pair of the run by both sides' BFCL scores (module docstring).

    Args:
        pairs: the run's scored pairs with their exchanges' sources.
        run_id: the run (stamped on every judgement).
        baseline: the baseline model's score files (:func:`read_bfcl_scores`).
        candidate: the candidate model's.

    Raises:
        ConfigError: the two sides' score files disagree on a category's item count
            (they are not scores of the same questions).
    """
    result = ReferenceImport()
    for category in sorted(set(baseline) | set(candidate)):
        tally = CategoryTally(category)
        base, cand = baseline.get(category), candidate.get(category)
        if base is not None and cand is not None and base.total_count != cand.total_count:
            raise ConfigError(
                f"BFCL {category}: the baseline's score file has {base.total_count} items, "
                f"the candidate's {cand.total_count}; they do not score the same questions",
                field="scores",
            )
        either = base if base is not None else cand
        tally.items = either.total_count if either is not None else 0
        tally.baseline_accuracy = base.accuracy if base else math.nan
        tally.candidate_accuracy = cand.accuracy if cand else math.nan
        result.categories[category] = tally
    seen: dict[str, set[int]] = {}
    for pair in pairs:
        result.pairs += 1
        item = bfcl_item(pair.source)
        if item is None:
            result.pairs_without_item += 1
            continue
        category, position = item
        base, cand = baseline.get(category), candidate.get(category)
        if base is None or cand is None:
            result.pairs_without_scores[category] = result.pairs_without_scores.get(category, 0) + 1
            continue
        if position >= base.total_count:
            result.pairs_out_of_range += 1
            continue
        baseline_pass, candidate_pass = base.passed(position), cand.passed(position)
        outcome = reference_outcome(baseline_pass, candidate_pass)
        tally = result.categories[category]
        tally.matched += 1
        tally.baseline_pass_matched += baseline_pass
        tally.candidate_pass_matched += candidate_pass
        if outcome is QualityOutcome.CANDIDATE_BETTER:
            tally.better += 1
        elif outcome is QualityOutcome.CANDIDATE_WORSE:
            tally.worse += 1
        else:
            tally.tie += 1
        seen.setdefault(category, set()).add(position)

        result.judgements.append(
            PairJudgement(
                run_id=run_id,
                exchange_id=pair.exchange_id,
                task_type=pair.task_type,
                source=JudgementSource.REFERENCE,
                outcome=outcome,
                rationale=(
                    f"BFCL official score of {category}_{position}: baseline "
                    f"{_side(baseline_pass, base, position)}, candidate "
                    f"{_side(candidate_pass, cand, position)}"
                ),
                baseline_pass=baseline_pass,
                candidate_pass=candidate_pass,
                checker=BFCL_CHECKER,
            )
        )
    for category, tally in result.categories.items():
        tally.not_in_run = tally.items - len(seen.get(category, set()))
    return result
