"""Pair scoring of real AlpacaEval upgrade pairs with the real MiniLM weights."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shadoweval.compare.encoders import MiniLMEncoder
from shadoweval.compare.pair import PairInput, score_pairs
from shadoweval.records import (
    Exchange,
    ModelIdentity,
    ReplayOutcome,
    ReplayTarget,
    RequestRecord,
    ResponseRecord,
)

pytestmark = pytest.mark.model

RUN = "alpaca-llama3-to-3.1"
ROWS = [*range(12), 199, 262, 537]


def test_llama3_to_llama31_rows(
    minilm: MiniLMEncoder, alpaca: dict[str, list[dict[str, Any]]]
) -> None:
    old, new = alpaca["Meta-Llama-3-8B-Instruct"], alpaca["Meta-Llama-3.1-8B-Instruct-Turbo"]
    items = []
    for row in ROWS:
        ex = Exchange(
            exchange_id=f"alpaca-{row}",
            task_type=old[row]["dataset"],
            request=RequestRecord(
                body=json.dumps(
                    {"messages": [{"role": "user", "content": old[row]["instruction"]}]}
                )
            ),
            response=ResponseRecord(status_code=200, text=old[row]["output"]),
            baseline_model=ModelIdentity(name=old[row]["generator"]),
        )
        candidate = ReplayOutcome(
            run_id=RUN,
            exchange_id=ex.exchange_id,
            model=ModelIdentity(name=new[row]["generator"]),
            response=ResponseRecord(status_code=200, text=new[row]["output"]),
        )
        repeat = ReplayOutcome(
            run_id=RUN,
            exchange_id=ex.exchange_id,
            target=ReplayTarget.BASELINE_REPEAT,
            model=ModelIdentity(name=old[row]["generator"]),
            response=ResponseRecord(status_code=200, text=old[row]["output"]),
        )
        items.append(PairInput(ex, candidate, repeat))

    started = time.perf_counter()
    scores = score_pairs(items, minilm, run_id=RUN, batch_size=32)
    elapsed = time.perf_counter() - started
    print(f"scored {len(scores)} real pairs in {elapsed:.2f} s")  # shown with -s

    assert [s.exchange_id for s in scores] == [f"alpaca-{row}" for row in ROWS]
    for s in scores:
        assert s.similarity is not None
        assert -1.0 <= s.similarity <= 1.0
        assert s.noise_similarity == pytest.approx(1.0, abs=1e-5)  # identical repeat
        assert s.similarity_detail is not None
        assert not s.similarity_detail.truncated
        assert s.output_tokens.baseline is None  # no usage in the data: never 0
        assert s.latency_baseline_source == "missing"
        assert s.template_leaks == ()
    long_pairs = [
        s for s in scores if s.similarity_detail and s.similarity_detail.candidate_chunks > 1
    ]
    assert long_pairs, "some Llama-3.1 answers exceed one 256-wordpiece window"
    by_id = {s.exchange_id: s for s in scores}
    assert by_id["alpaca-262"].similarity == pytest.approx(1.0, abs=1e-5)  # "Yes." both
    mean = sum(s.similarity or 0.0 for s in scores) / len(scores)
    assert 0.5 < mean < 0.99
