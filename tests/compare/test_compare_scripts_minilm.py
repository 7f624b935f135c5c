"""Answers in a script the embedding model does not cover (issue 14): Chinese with MiniLM.

all-MiniLM-L6-v2 was trained on English. On Chinese it still returns vectors, but
unrelated answers come out close together — the similarity no longer measures how much
changed. Each pair records its answers' scripts and those the configured model is not
declared to cover (``compare.model_scripts``), and the verdict's reasons warn.
"""

from __future__ import annotations

import json

import pytest

from shadoweval.compare.encoders import MiniLMEncoder
from shadoweval.compare.pair import PairInput, score_pairs
from shadoweval.config import CompareSettings
from shadoweval.records import (
    Coverage,
    Exchange,
    ModelIdentity,
    PairScore,
    ReplayOutcome,
    RequestRecord,
    ResponseRecord,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy

pytestmark = pytest.mark.model

RUN = "zh-run"
# (baseline answer, candidate answer): two unrelated answers, then a paraphrase.
ZH = [
    (
        "量子计算利用量子比特的叠加和纠缠来并行处理信息，从而在某些问题上比经典计算机更快。",
        "红烧肉的做法：先把五花肉切块焯水，再加冰糖炒糖色，最后加酱油和水慢炖一个小时。",
    ),
    (
        "北京是中国的首都，有着三千多年的建城历史和丰富的文化遗产。",
        "这台笔记本电脑的电池续航时间很短，我打算下周去商店退货。",
    ),
    (
        "量子计算利用量子比特的叠加和纠缠来并行处理信息，从而在某些问题上比经典计算机更快。",
        "量子计算机通过量子叠加与纠缠并行运算，在部分问题上快于传统计算机。",
    ),
]
EN = [
    (
        "Quantum computing uses the superposition and entanglement of qubits to process "
        "information in parallel, making it faster than classical computers on some problems.",
        "Braised pork: cut pork belly into pieces and blanch, caramelise rock sugar, then add "
        "soy sauce and water and simmer for an hour.",
    ),
    (
        "Beijing is the capital of China, with more than three thousand years of history and "
        "a rich cultural heritage.",
        "The battery life of this laptop is very short, so I plan to return it to the store "
        "next week.",
    ),
    (
        "Quantum computing uses the superposition and entanglement of qubits to process "
        "information in parallel, making it faster than classical computers on some problems.",
        "Quantum computers compute in parallel through superposition and entanglement, beating "
        "traditional computers on some problems.",
    ),
]


def items(prefix: str, texts: list[tuple[str, str]]) -> list[PairInput]:
    out = []
    for i, (baseline, candidate) in enumerate(texts):
        exchange = Exchange(
            exchange_id=f"{prefix}-{i}",
            task_type="chat",
            request=RequestRecord(
                body=json.dumps({"messages": [{"role": "user", "content": "?"}]})
            ),
            response=ResponseRecord(status_code=200, text=baseline),
            baseline_model=ModelIdentity(name="old"),
        )
        replay = ReplayOutcome(
            run_id=RUN,
            exchange_id=exchange.exchange_id,
            model=ModelIdentity(name="new"),
            response=ResponseRecord(status_code=200, text=candidate),
        )
        out.append(PairInput(exchange, replay, None))
    return out


@pytest.fixture(scope="module")
def scored(minilm: MiniLMEncoder) -> tuple[list[PairScore], list[PairScore]]:
    covered = CompareSettings().covered_scripts()
    assert covered == frozenset({"Latin"})  # the default: MiniLM is English-only
    zh = score_pairs(items("zh", ZH), minilm, run_id=RUN, covered_scripts=covered)
    en = score_pairs(items("en", EN), minilm, run_id=RUN, covered_scripts=covered)
    return zh, en


def test_minilm_puts_unrelated_chinese_answers_close_together(
    scored: tuple[list[PairScore], list[PairScore]],
) -> None:
    """Why the warning exists: the unrelated Chinese pairs score about 0.5, the unrelated
    English ones under 0.1, so a changed Chinese answer looks half-unchanged."""
    zh, en = scored
    zh_unrelated = [s.similarity for s in zh[:2]]
    en_unrelated = [s.similarity for s in en[:2]]
    assert all(v is not None for v in zh_unrelated + en_unrelated)
    assert min(zh_unrelated) > max(en_unrelated) + 0.25  # type: ignore[type-var,operator]
    # A paraphrase still scores higher than an unrelated answer in both languages.
    assert zh[2].similarity > max(zh_unrelated)  # type: ignore[operator,type-var]


def test_each_pair_records_its_scripts_and_those_the_model_does_not_cover(
    scored: tuple[list[PairScore], list[PairScore]],
) -> None:
    zh, en = scored
    for score in zh:
        detail = score.similarity_detail
        assert detail is not None
        assert (detail.baseline_script, detail.candidate_script) == ("Han", "Han")
        assert detail.uncovered_scripts == ("Han",)
    for score in en:
        detail = score.similarity_detail
        assert detail is not None
        assert (detail.baseline_script, detail.candidate_script) == ("Latin", "Latin")
        assert detail.uncovered_scripts == ()


def test_a_model_declared_to_cover_han_or_any_script_gets_no_mark(minilm: MiniLMEncoder) -> None:
    for scripts in (("Latin", "Han"), ("*",)):
        covered = CompareSettings(model_scripts=scripts).covered_scripts()
        (score,) = score_pairs(items("zh", ZH[:1]), minilm, run_id=RUN, covered_scripts=covered)
        assert score.similarity_detail is not None
        assert score.similarity_detail.candidate_script == "Han"
        assert score.similarity_detail.uncovered_scripts == ()


def test_the_verdict_warns_naming_the_script_and_the_setting(
    scored: tuple[list[PairScore], list[PairScore]],
) -> None:
    zh, en = scored
    scores = zh + en
    policy = GatePolicy()
    coverage = Coverage(
        captured=len(scores),
        replayed=len(scores),
        paired=len(scores),
        errored=0,
        warmup=0,
        skipped=0,
        share=1.0,
        per_task_type={"chat": len(scores)},
    )
    verdict = evaluate_gate(pairs_frame(scores, policy), policy, run_id=RUN, coverage=coverage)
    warnings = [r for r in verdict.reasons if "not declared to cover" in r]
    assert warnings == [
        "similarity: 3 of 6 pairs (50.0%) have an answer in a script the embedding model is "
        "not declared to cover (Han 3; compare.model_scripts): their similarity may not "
        "measure how much changed; score with a model that covers them (compare.model_path) "
        "or read the direction checks"
    ]
    english_only = evaluate_gate(pairs_frame(en, policy), policy, run_id=RUN, coverage=coverage)
    assert not [r for r in english_only.reasons if "not declared to cover" in r]
