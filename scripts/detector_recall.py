"""Recall and precision of the degeneration and script-switch detectors on real answers.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/detector_recall.py            # the docs/gate.md table
    PYTHONPATH=. .venv/bin/python scripts/detector_recall.py --n 12 --json   # make test size
    PYTHONPATH=. .venv/bin/python scripts/detector_recall.py --show-sample   # what was read

Two sets, both from the AlpacaEval files in ``../shared/data/alpaca_eval`` (4 × 805 real
answers, read, never copied):

* **real**: every answer as the model wrote it. Every flagged answer was read by eye
  (the verdicts are :data:`HAND_CHECKED`: a flagged row not in it prints as *unjudged*), and
  a seeded sample of 40 unflagged answers per detector (``--show-sample`` prints them).
  For the script switch the check is exhaustive: every answer with a Han, Kana or Hangul
  letter to a prompt without one was read (:data:`MISSED` holds the one miss).
* **spliced**: a seeded sample of ``--n`` real answers per detector, each kept unmodified
  (a negative) and modified into the documented failure shape (a positive): for
  degeneration one of its lines repeated 3–5 times back to back (``consecutive``) or the
  copies put elsewhere in the answer (``scattered``, a shape the detector does not claim);
  for the switch a CJK fragment quoted from a real Qwen answer put in place of a word
  mid-sentence, glued to the word before it half of the time (``a deeper湛蓝``). Originals
  that are real failures (:data:`HAND_CHECKED`) are left out of the negatives.

Prints a markdown table (detector, set, n, flagged, true positives, precision, recall, how
checked), or with ``--json`` the same rows as JSON. About 10 s for the full table.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from shadoweval.compare.harms import is_degenerate, is_language_switch, script_letter_counts
from shadoweval.compare.harms.language import CJK_SCRIPTS, code_fence_segments

DATA: Final = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "alpaca_eval"
MODELS: Final = (
    "Meta-Llama-3-8B-Instruct",
    "Meta-Llama-3.1-8B-Instruct-Turbo",
    "Qwen1.5-72B-Chat",
    "Qwen2-72B-Instruct",
)
DETECTORS: Final[dict[str, Callable[[str, str], bool]]] = {
    "degeneration": lambda answer, _prompt: is_degenerate(answer),
    "language_switch": is_language_switch,
}
HAND_CHECKED: Final[dict[tuple[str, str], frozenset[int]]] = {
    # Every row flagged on the real files, read by eye: each one a real failure.
    ("degeneration", "Meta-Llama-3.1-8B-Instruct-Turbo"): frozenset({
        14, 24, 27, 30, 51, 67, 73, 81, 84, 127, 130, 180, 189, 196, 201, 209, 216, 217, 255,
        264, 269, 294, 297, 310, 341, 361, 372, 394, 410, 419, 441, 455, 496, 510, 520, 524,
        551, 576, 581, 614, 618, 746, 758, 775, 786, 789, 799,
    }),
    ("degeneration", "Qwen1.5-72B-Chat"): frozenset({535}),
    ("language_switch", "Qwen1.5-72B-Chat"): frozenset({
        1, 49, 79, 89, 96, 112, 113, 134, 145, 187, 240, 248, 279, 312, 329, 332, 334, 380,
        390, 392, 399, 435, 444, 454, 478, 497, 535, 536, 541, 548, 556, 560, 583, 595, 604,
        643, 650, 722, 749, 755, 762, 777, 801,
    }),
    ("language_switch", "Qwen2-72B-Instruct"): frozenset({13, 25, 544}),
}  # fmt: skip
"""(detector, model) → the rows that are real failures, by reading every flagged answer
(and, for the switch, every answer with a CJK letter to a prompt without one)."""
MISSED: Final[dict[tuple[str, str], frozenset[int]]] = {
    # 'the RTL-SDR (便宜且广泛可用)': Chinese for "cheap and widely available", shaped as a gloss.
    ("language_switch", "Qwen1.5-72B-Chat"): frozenset({312}),
}
CJK_FRAGMENTS: Final = (
    # Quoted from real Qwen1.5-72B-Chat / Qwen2-72B-Instruct AlpacaEval answers.
    "湛蓝", "渗入", "的理想湿度约为", "服务区", "口碑", "弱点", "南极", "烦躁", "细节",
    "灾难", "文艺复兴", "臀部", "恭", "核", "船", "名片", "无人之地", "辣酱",
)  # fmt: skip
SAMPLE_UNFLAGGED: Final = 40
_WORD_GAP: Final = re.compile(r"(?<=[A-Za-z,]) (?=[A-Za-z])")


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: counts, and precision/recall as fractions (None: not measured)."""

    detector: str
    set: str
    n: int
    flagged: int
    true_positives: int
    precision: float | None
    recall: float | None
    how_checked: str


def load(folder: Path) -> dict[str, list[dict[str, str]]]:
    """The four AlpacaEval files, model → its 805 rows (``instruction``, ``output``, …)."""
    if not folder.is_dir():
        raise SystemExit(f"alpaca_eval folder not found: {folder}")
    return {
        model: json.loads((folder / model / "model_outputs.json").read_text(encoding="utf-8"))
        for model in MODELS
    }


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def real_rows(data: dict[str, list[dict[str, str]]], seed: int) -> tuple[list[Row], list[str]]:
    """The table rows on the real answers, and the sampled unflagged answers (for reading)."""
    rows: list[Row] = []
    sample_lines: list[str] = []
    rng = random.Random(seed)
    for detector, fires in DETECTORS.items():
        flagged: list[tuple[str, int]] = []
        unflagged: list[tuple[str, int]] = []
        for model, answers in data.items():
            for index, row in enumerate(answers):
                hit = fires(row["output"], row["instruction"])
                (flagged if hit else unflagged).append((model, index))
        truth = {(m, i) for (d, m), rows_ in HAND_CHECKED.items() if d == detector for i in rows_}
        missed = {(m, i) for (d, m), rows_ in MISSED.items() if d == detector for i in rows_}
        true_flags = sum(1 for key in flagged if key in truth)
        unjudged = [key for key in flagged if key not in truth]
        sample = rng.sample(unflagged, SAMPLE_UNFLAGGED)
        sample_lines += [f"{detector} unflagged sample: {model} row {i}" for model, i in sample]
        exhaustive = detector == "language_switch"
        how = (
            "every flagged answer read"
            + (f" ({len(unjudged)} unjudged: {unjudged[:5]})" if unjudged else "")
            + f"; {SAMPLE_UNFLAGGED} unflagged read (seeded), "
            + (
                "and every answer with a CJK letter to a prompt without one"
                if exhaustive
                else "none a loop; recall over all 3,220 unknown"
            )
        )
        rows.append(
            Row(
                detector=detector,
                set="AlpacaEval real (4 × 805)",
                n=sum(len(answers) for answers in data.values()),
                flagged=len(flagged),
                true_positives=true_flags,
                precision=_ratio(true_flags, len(flagged)),
                recall=_ratio(true_flags, true_flags + len(missed)) if exhaustive else None,
                how_checked=how,
            )
        )
    return rows, sample_lines


def _prose_lines(text: str) -> list[int]:
    """Indexes of the answer's lines outside code blocks that have ≥ 3 words with a letter."""
    lines = text.split("\n")
    in_code = [False] * len(lines)
    position = 0
    for segment, is_code in code_fence_segments(text):
        first = text.count("\n", 0, position)
        count = segment.count("\n") + 1
        if is_code:
            for line in range(first, min(first + count, len(lines))):
                in_code[line] = True
        position += len(segment)
    return [
        i
        for i, line in enumerate(lines)
        if not in_code[i] and sum(any(c.isalpha() for c in word) for word in line.split()) >= 3
    ]


def repeat_line(text: str, rng: random.Random, *, scattered: bool) -> str | None:
    """``text`` with one of its prose lines said 3–5 times in all (None: no such line)."""
    candidates = _prose_lines(text)
    if not candidates:
        return None
    lines = text.split("\n")
    chosen = rng.choice(candidates)
    copies = rng.randint(3, 5) - 1
    if not scattered:
        return "\n".join(lines[: chosen + 1] + [lines[chosen]] * copies + lines[chosen + 1 :])
    others = [i for i in range(len(lines)) if abs(i - chosen) > 1]
    if len(others) < copies:
        return None
    for position in sorted(rng.sample(others, copies), reverse=True):
        lines.insert(position, lines[chosen])
    return "\n".join(lines)


def splice_fragment(text: str, rng: random.Random) -> str | None:
    """``text`` with a real CJK fragment in place of one word mid-sentence (None: no place)."""
    candidates = _prose_lines(text)
    lines = text.split("\n")
    places = [(i, m) for i in candidates for m in _WORD_GAP.finditer(lines[i])]
    if not places:
        return None
    line_index, gap = rng.choice(places)
    line = lines[line_index]
    end = gap.end()
    word_end = end + len(re.match(r"[A-Za-z]*", line[end:]).group(0))  # type: ignore[union-attr]
    fragment = rng.choice(CJK_FRAGMENTS)
    start = gap.start() if rng.random() < 0.5 else end
    lines[line_index] = line[:start] + fragment + line[word_end:]
    return "\n".join(lines)


def _eligible(row: dict[str, str]) -> bool:
    prompt = script_letter_counts(row["instruction"])
    return not any(prompt[script] for script in CJK_SCRIPTS) and len(row["output"]) >= 40


def spliced_rows(data: dict[str, list[dict[str, str]]], n: int, seed: int) -> list[Row]:
    """The table rows on the seeded spliced set (``n`` originals per detector)."""
    rng = random.Random(seed)
    real_failures = {(d, m, i) for (d, m), rows_ in HAND_CHECKED.items() for i in rows_}
    pool = [
        (m, i) for m, answers in data.items() for i, row in enumerate(answers) if _eligible(row)
    ]
    makers: dict[str, Sequence[tuple[str, Callable[[str, random.Random], str | None]]]] = {
        "degeneration": (
            ("a line ×3–5 back to back", lambda t, r: repeat_line(t, r, scattered=False)),
            ("a line ×3–5 scattered", lambda t, r: repeat_line(t, r, scattered=True)),
        ),
        "language_switch": (("a CJK fragment mid-sentence", splice_fragment),),
    }
    rows: list[Row] = []
    for detector, fires in DETECTORS.items():
        originals = rng.sample(pool, n)
        negatives = [(m, i) for m, i in originals if (detector, m, i) not in real_failures]
        false_flags = [
            (m, i) for m, i in negatives
            if fires(data[m][i]["output"], data[m][i]["instruction"])
        ]  # fmt: skip
        how = f"unmodified; {n - len(negatives)} real failures left out"
        if false_flags:
            how += f"; flagged {false_flags[:5]}"
        rows.append(
            Row(
                detector, "spliced: originals", len(negatives), len(false_flags), 0, None, None, how
            )
        )
        for shape, make in makers[detector]:
            made = [
                (text, data[m][i]["instruction"])
                for m, i in negatives
                if (text := make(data[m][i]["output"], rng)) is not None
            ]
            hits = sum(1 for text, prompt in made if fires(text, prompt))
            rows.append(
                Row(
                    detector=detector,
                    set=f"spliced: {shape}",
                    n=len(made),
                    flagged=hits,
                    true_positives=hits,
                    precision=_ratio(hits, hits + len(false_flags)),
                    recall=_ratio(hits, len(made)),
                    how_checked=f"precision against the {len(negatives)} originals above",
                )
            )
    return rows


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def markdown(rows: list[Row]) -> str:
    """The rows as the docs/gate.md table."""
    head = "| detector | set | n | flagged | true positives | precision | recall | how checked |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---|"]
    lines += [
        f"| `{r.detector}` | {r.set} | {r.n} | {r.flagged} | {r.true_positives} | "
        f"{_percent(r.precision)} | {_percent(r.recall)} | {r.how_checked} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DATA, help="the alpaca_eval folder")
    parser.add_argument("--n", type=int, default=400, help="originals per detector (spliced set)")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--show-sample", action="store_true", help="print the sampled rows")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be at least 1, got {args.n}")
    data = load(args.data)
    real, sample = real_rows(data, args.seed)
    rows = real + spliced_rows(data, args.n, args.seed)
    if args.show_sample:
        print("\n".join(sample))
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
