"""The judge stage's cost parts: the estimate, the budget, the sending order, the budgeted
runner against the mock judge on a real socket, and the arms and families of a judge."""

from __future__ import annotations

import dataclasses

import pytest

from shadoweval.judge import JudgeProbe, preflight_judge
from shadoweval.judge.arms import (
    Arm,
    arm_conflicts,
    endpoint_key,
    model_family,
    model_names,
    self_preference_risks,
)
from shadoweval.judge.budgeted import judge_within_budget
from shadoweval.judge.cost import (
    CapturedTokens,
    JudgeBudget,
    JudgeSpend,
    PairEstimate,
    chars_tokens,
    estimate_pair,
    template_tokens,
)
from shadoweval.judge.prompt import MAX_ANSWER_CHARS, Answer
from shadoweval.judge.selection import Selection, TaskTypeSelection, send_order
from shadoweval.records import JudgeVote
from shadoweval.simulation.mock_judge import create_judge_app
from tests.judge.conftest import client, make_pair, serving
from tests.judge.seed import RULE


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("gpt-4o", "gpt-4o-mini"),
        ("llama-3.1-8b", "llama-3.1-70b"),
        ("qwen2.5", "qwen2.5-coder"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-0.5b-instruct-q4_k_m.gguf"),
        ("gemini-1.5-pro", "gemini-1.5-flash"),
        ("claude-3-5-sonnet-20241022", "claude-3-5-haiku"),
        ("mistral-7b-instruct-v0.2", "mistral-7b"),
    ],
)
def test_same_family(a: str, b: str) -> None:
    assert model_family(a) == model_family(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("gpt-4o", "gpt-4.1"), ("llama-3.1-8b", "llama-3.2-1b"), ("qwen2.5", "qwen3"),
     ("mistral-7b", "mixtral-8x7b"), ("mock-judge", "candidate-7b")],
)  # fmt: skip
def test_other_families(a: str, b: str) -> None:
    assert model_family(a) != model_family(b)


def test_the_family_words() -> None:
    assert model_family("gpt-4o-mini") == "gpt-4o"
    assert model_family("llama-3.1-70b-instruct") == "llama-3.1"
    assert model_family("Qwen/Qwen2.5-Coder-7B") == "qwen2.5"
    assert model_family("qwen3-30b-a3b") == "qwen3"
    assert model_family("7b") == "7b"  # the first word stops: its own family


def test_endpoints_compare_as_servers() -> None:
    assert endpoint_key("http://localhost:8000/v1") == endpoint_key("http://127.0.0.1:8000")
    assert endpoint_key("https://u:p@api.example.com/v1/chat/completions?x=1") == (
        "https://api.example.com:443"
    )
    assert endpoint_key("http://127.0.0.1:8000") != endpoint_key("http://127.0.0.1:8001")
    assert endpoint_key("judge:8000") is None


def test_conflicts_and_risks() -> None:
    arms = [
        Arm("baseline", "llama-3.1-8b-instruct", None),
        Arm("candidate", "llama-3.1-70b-instruct", "http://gpu-2:8000"),
    ]
    assert arm_conflicts("judge-x", "http://gpu-3:8000", arms) == []
    assert arm_conflicts("LLAMA-3.1-70B-INSTRUCT", "http://gpu-2:8000/v1", arms) == [
        ("model", "LLAMA-3.1-70B-INSTRUCT", "the candidate model 'llama-3.1-70b-instruct'"),
        ("url", "http://gpu-2:8000/v1", "the candidate URL 'http://gpu-2:8000'"),
    ]
    risks = self_preference_risks("llama-3.1-405b", arms)
    assert len(risks) == 2
    assert risks[0].startswith(
        "self-preference risk: judge 'llama-3.1-405b' shares family 'llama-3.1' with the "
        "baseline 'llama-3.1-8b-instruct' (Zheng et al. 2023"
    )
    assert self_preference_risks("qwen2.5-72b", arms) == []


def test_the_estimate_reads_captured_usage_unless_the_prompt_cuts_the_part() -> None:
    pair = make_pair(baseline="x" * 40, candidate="y" * 80)
    template = template_tokens("text")
    usage = CapturedTokens(request_prompt_tokens=30, baseline_completion_tokens=9,
                           candidate_completion_tokens=21)  # fmt: skip
    full = estimate_pair(pair, usage, max_tokens=256)
    assert full.source == "captured usage"
    assert full.prompt_tokens_per_call == template + 30 + 9 + 21
    assert full.completion_tokens_per_call == 256
    assert full.pair_tokens == 2 * (template + 60 + 256)
    none = estimate_pair(pair, CapturedTokens(), max_tokens=256)
    assert none.source == "chars/4"
    conversation = "[system]\nBe brief.\n\n[user]\nWhat is the capital of France?"
    assert none.prompt_tokens_per_call == template + chars_tokens(conversation) + 10 + 20
    long = make_pair(candidate="z" * (MAX_ANSWER_CHARS + 4000))
    cut = estimate_pair(long, usage, max_tokens=256)
    assert cut.source == "mixed"  # the candidate's usage counts 4,000 characters not sent
    failed = dataclasses.replace(make_pair(), candidate=Answer(error="http_status"))
    assert estimate_pair(failed, usage, max_tokens=256).source == "mixed"
    assert template_tokens("json_schema") != template


def test_the_budget_in_tokens_and_money() -> None:
    budget = JudgeBudget(tokens=1000)
    assert budget.fits(600, 400)
    assert not budget.fits(600, 401)
    priced = JudgeBudget(usd=0.01, price_per_million_input_tokens=2.0,
                         price_per_million_output_tokens=8.0)  # fmt: skip
    assert priced.usd_of(1000, 1000) == pytest.approx(0.01)
    assert priced.fits(1000, 1000)
    assert not priced.fits(1000, 1001)
    assert priced.describe() == "$0.01"
    assert not JudgeBudget().capped
    assert JudgeBudget().fits(10**12, 10**12)
    with pytest.raises(ValueError, match="needs both prices"):
        JudgeBudget(usd=1.0)
    with pytest.raises(ValueError, match=">= 1"):
        JudgeBudget(tokens=0)


def test_spend_counts_usage_estimates_and_nothing() -> None:
    estimate = PairEstimate("e", prompt_tokens_per_call=100, completion_tokens_per_call=50,
                            source="chars/4")  # fmt: skip
    spend = JudgeSpend()
    spend.count(JudgeVote(order="baseline_first", preferred="tie", prompt_tokens=70,
                          completion_tokens=5), estimate)  # fmt: skip
    spend.count(JudgeVote(order="candidate_first", preferred="tie"), estimate)  # no usage
    spend.count(JudgeVote(order="baseline_first", error="HTTP 500: boom"), estimate)
    spend.count(JudgeVote(order="baseline_first", error="connect: refused"), estimate)
    assert (spend.calls, spend.prompt_tokens, spend.completion_tokens) == (4, 170, 55)
    assert spend.calls_without_usage == 1


def test_the_send_order_interleaves_strata_and_task_types() -> None:
    chat = TaskTypeSelection("chat", 10, 8, 0, 8, selected=("a1", "a2", "a3", "a4", "b1", "b2"))
    code = TaskTypeSelection("code", 3, 2, 0, 8, selected=("c1", "c2"))
    strata = {"a1": 1, "a2": 1, "a3": 1, "a4": 1, "b1": 2, "b2": 2, "c1": 1, "c2": 1}
    order = send_order(Selection(stratum_of=strata, task_types={"chat": chat, "code": code}))
    assert order[:3] == ["a1", "b1", "c1"]  # every stratum of every task type first
    assert sorted(order) == sorted(strata)
    assert order.index("a2") < order.index("a3") < order.index("a4")  # sample order kept
    assert order.index("b2") < order.index("a4")  # proportional: b2 at 1/2, a4 at 3/4


@pytest.mark.anyio
async def test_the_budgeted_runner_stops_where_the_next_pair_does_not_fit() -> None:
    """Against the mock judge: each pair's estimate is its two calls at 400 prompt and 64
    completion tokens; the real calls are smaller (about 260 + 11), so the stop is where the
    counted usage plus the next estimate passes the budget, and nothing after it is sent."""
    app = create_judge_app(RULE)
    pairs = [make_pair(n) for n in range(10)]
    estimates = [PairEstimate(p.exchange_id, 400, 64, "chars/4") for p in pairs]
    budget = JudgeBudget(tokens=3 * 928 + 10)
    judged: list[str] = []
    with serving(app) as (url, state):
        spend = JudgeSpend()
        async with client(url, concurrency=4) as judge:
            stop = await judge_within_budget(
                judge, pairs, estimates, budget, spend,
                on_judged=lambda j: judged.append(j.exchange_id),
            )  # fmt: skip
        assert stop is not None
        assert 3 <= stop < 10
        assert sorted(judged) == [p.exchange_id for p in pairs[:stop]]
        assert state.requests == 2 * stop == spend.calls
        assert spend.tokens <= budget.tokens < spend.tokens + 928  # type: ignore[operator]
        unlimited = JudgeSpend()
        async with client(url) as judge:
            assert await judge_within_budget(judge, pairs[:2], estimates[:2], JudgeBudget(),
                                             unlimited) is None  # fmt: skip
        assert unlimited.calls == 4


@pytest.mark.parametrize(
    ("judge", "arm"),
    [
        ("Hermes-2-Pro-Mistral-7B", "NousResearch_Hermes-2-Pro-Mistral-7B"),  # bfcl's "_"
        ("NousResearch_Hermes-2-Pro-Mistral-7B", "hermes-2-pro-mistral-7b"),
        ("Hermes-2-Pro-Llama-3-8B-Q4_K_M", "NousResearch_Hermes-2-Pro-Llama-3-8B"),
        ("TheBloke_Hermes-2-Pro-Llama-3-8B-GGUF", "NousResearch/Hermes-2-Pro-Llama-3-8B"),
        ("qwen2.5-7b-instruct.Q8_0.gguf", "Qwen/Qwen2.5-7B-Instruct"),
        ("meta-llama_Llama-3.1-8B-Instruct-AWQ", "llama-3.1-8b-instruct"),
        ("mistral-7b-instruct-v0.2-q4_1", "Mistral-7B-Instruct-v0.2-fp16"),
        ("phi-3-mini-4k-instruct:q4_k_m", "phi-3-mini-4k-instruct-bf16"),
        ("gemma-2-9b-it-int8", "gemma-2-9b-it-exl2"),
    ],
)
def test_the_same_model_under_an_org_prefix_or_a_packaging_suffix_is_refused(
    judge: str, arm: str
) -> None:
    found = arm_conflicts(judge, None, [Arm("baseline", arm, None)])
    assert found == [("model", judge, f"the baseline model {arm!r}")]


@pytest.mark.parametrize(
    ("judge", "arm"),
    [
        ("Hermes-2-Pro-Mistral-7B-Instruct", "NousResearch_Hermes-2-Pro-Mistral-7B"),  # tuned
        ("qwen2.5-7b-instruct", "NousResearch_Hermes-2-Pro-Mistral-7B"),  # another family
        ("mistral-7b", "mistral_7b-instruct"),  # "7b" is no model name after the "_"
        ("llama-3.1-70b-q4_k_m", "llama-3.1-8b"),  # same family, another size
        ("gpt-4o", "gpt-4o-mini"),
    ],
)
def test_another_model_is_not_refused(judge: str, arm: str) -> None:
    assert arm_conflicts(judge, None, [Arm("candidate", arm, None)]) == []


def test_the_names_and_families_of_imported_models() -> None:
    assert model_names("NousResearch_Hermes-2-Pro-Mistral-7B") == (
        "nousresearch_hermes-2-pro-mistral-7b",
        "hermes-2-pro-mistral-7b",
    )
    assert model_names("Hermes-2-Pro-Llama-3-8B-Q4_K_M.gguf") == ("hermes-2-pro-llama-3-8b",)
    assert model_names("mistral_7b") == ("mistral_7b",)
    assert model_family("NousResearch_Hermes-2-Pro-Mistral-7B") == "hermes-2"
    assert model_family("Hermes-2-Pro-Llama-3-8B-Q4_K_M") == "hermes-2"


def test_the_risk_names_every_arm_of_the_judges_family() -> None:
    """The bfcl import's arms: the baseline with an ``_`` organisation prefix, its replica
    under the same name, and the candidate — each named in its role."""
    arms = [
        Arm("baseline", "NousResearch_Hermes-2-Pro-Mistral-7B", None),
        Arm("candidate", "Hermes-2-Pro-Llama-3-8B", "http://gpu-2:8000"),
        Arm("baseline replica", "NousResearch_Hermes-2-Pro-Mistral-7B", "http://gpu-3:8000"),
    ]
    risks = self_preference_risks("Hermes-2-Pro-Llama-3-70B", arms)
    assert [r.split(" with the ")[1].split(" (")[0] for r in risks] == [
        "baseline 'NousResearch_Hermes-2-Pro-Mistral-7B'",
        "candidate 'Hermes-2-Pro-Llama-3-8B'",
        "baseline replica 'NousResearch_Hermes-2-Pro-Mistral-7B'",
    ]
    assert all("shares family 'hermes-2'" in r for r in risks)
    assert self_preference_risks("qwen2.5-72b-instruct", arms) == []


def test_the_calibration_is_the_reported_over_the_estimated() -> None:
    estimate = PairEstimate("e", prompt_tokens_per_call=100, completion_tokens_per_call=20,
                            source="chars/4")  # fmt: skip
    spend = JudgeSpend()
    assert spend.calibration == 1.0
    spend.count_preflight(JudgeVote(order="baseline_first", preferred="tie", prompt_tokens=270,
                                    completion_tokens=30), estimate)  # fmt: skip
    assert (spend.preflight_tokens, spend.pair_tokens) == (300, 0)
    assert spend.calibration == pytest.approx(300 / 120)
    spend.count(JudgeVote(order="baseline_first", preferred="tie"), estimate)  # no usage
    assert spend.calibration == pytest.approx(300 / 120)  # counted at its estimate only
    spend.count(JudgeVote(order="candidate_first", preferred="tie", prompt_tokens=10,
                          completion_tokens=5), estimate)  # fmt: skip
    assert spend.calibration == pytest.approx(315 / 240)
    assert spend.pair_tokens == 120 + 15
    assert JudgeSpend(reported_tokens=50, reported_estimate_tokens=100).calibration == 1.0


UNDER = PairEstimate("e", prompt_tokens_per_call=100, completion_tokens_per_call=2,
                     source="chars/4")  # fmt: skip
"""An estimate well under what the mock judge reports for a :func:`make_pair` call (its
prompt's words, about 260, and a 10-word answer)."""


@pytest.mark.anyio
async def test_estimates_that_undershoot_are_calibrated_and_the_cap_holds() -> None:
    """The estimates are about a third of the judge's real usage. One pair at a time, the
    first completed pair calibrates the rest: the run stops within the cap, where the
    uncalibrated estimate would still have admitted the next pair (and passed the cap)."""
    app = create_judge_app(RULE)
    pairs = [make_pair(n) for n in range(10)]
    estimates = [dataclasses.replace(UNDER, exchange_id=p.exchange_id) for p in pairs]
    budget = JudgeBudget(tokens=2000)
    with serving(app) as (url, state):
        spend = JudgeSpend()
        async with client(url, concurrency=1) as judge:
            stop = await judge_within_budget(judge, pairs, estimates, budget, spend)
        assert stop is not None
        assert state.requests == 2 * stop
        per_pair = spend.tokens // stop
        assert per_pair > 2 * UNDER.pair_tokens  # the estimate undershoots by far
        assert spend.tokens <= 2000
        assert spend.tokens + UNDER.pair_tokens <= 2000  # chars/4 alone would have sent more
        assert spend.tokens + per_pair > 2000  # the calibrated next pair did not fit
        assert spend.calibration > 2


@pytest.mark.anyio
async def test_the_preflight_calibrates_the_first_pairs_sent_together() -> None:
    """With four calls in flight nothing completes before the first pairs are admitted:
    the preflight, sent first, calibrates them, and the run keeps its cap."""
    app = create_judge_app(RULE)
    pairs = [make_pair(n) for n in range(10)]
    estimates = [dataclasses.replace(UNDER, exchange_id=p.exchange_id) for p in pairs]
    budget = JudgeBudget(tokens=3000)
    with serving(app) as (url, state):
        spend = JudgeSpend()
        async with client(url, concurrency=4) as judge:

            def count(probe: JudgeProbe) -> None:
                assert probe.vote is not None
                spend.count_preflight(probe.vote, estimates[0])

            assert await preflight_judge(judge, pairs[0], on_probe=count) is None
            assert spend.calibration > 2
            stop = await judge_within_budget(judge, pairs, estimates, budget, spend)
        assert stop is not None
        assert state.requests == 2 * stop + 1
        assert spend.preflight_tokens > 0
        assert spend.tokens <= 3000 < spend.tokens + spend.pair_tokens // stop
