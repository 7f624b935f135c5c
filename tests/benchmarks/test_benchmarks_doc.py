"""Every table of docs/benchmarks.md says which command made it (issue 33 item 5).

A section (a ``## `` or ``### `` heading down to the next such heading) that holds a
markdown table must name the command that measured it: a line with
``python benchmarks/…``, ``python -m benchmarks.…`` or ``shadow-eval …``. The check reads
text only: whether the command still runs is the smoke tests' business
(``tests/benchmarks/test_benchmarks_smoke.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
HEADING = re.compile(r"^#{2,3} ")
TABLE_RULE = re.compile(r"^\|\s*:?-{3,}")
COMMAND = re.compile(r"python3? (-m benchmarks\.|\S*benchmarks/)\w+|shadow-eval \w")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """``(heading, lines)`` of each ``##``/``###`` section, fenced code included."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if HEADING.match(line):
            found.append((line, []))
        elif found:
            found[-1][1].append(line)
    return found


def test_every_table_section_names_its_command() -> None:
    missing = [
        heading
        for heading, lines in sections(DOC.read_text(encoding="utf-8"))
        if any(TABLE_RULE.match(line) for line in lines)
        and not any(COMMAND.search(line) for line in lines)
    ]
    assert not missing, f"docs/benchmarks.md sections with a table and no command: {missing}"


def test_the_check_sees_a_table_without_command() -> None:
    text = (
        "## A\n\n| a |\n|---|\n| 1 |\n\n## B\n\n```\npython benchmarks/x.py\n```\n| b |\n|---:|\n"
    )
    parsed = sections(text)
    assert [h for h, _ in parsed] == ["## A", "## B"]
    assert any(TABLE_RULE.match(line) for line in parsed[0][1])
    assert not any(COMMAND.search(line) for line in parsed[0][1])
    assert any(COMMAND.search(line) for line in parsed[1][1])
