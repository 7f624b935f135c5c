"""Exported text is redacted by the capture body rules, and the manifest counts the hits."""

from __future__ import annotations

import json

from shadoweval.application.redaction import body_redaction
from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.config import BodyRedactionSettings
from shadoweval.export import CountingRedactor, build_export, make_request
from shadoweval.storage import Repository
from tests.export.seed import CANARY, EMAIL, seed_run


def test_counting_counts_only_the_markers_a_call_adds() -> None:
    redaction = body_redaction()
    counter = CountingRedactor(redaction)
    text = f"mail {EMAIL}, call +44 20 7946 0958, already [REDACTED:email] and {CANARY}"
    out = counter(text)
    assert EMAIL not in out
    assert CANARY not in out
    assert out.count("[REDACTED:email]") == 2
    assert counter.counts() == {"email": 1, "phone": 1, "secret_key": 1}
    assert counter("nothing to see") == "nothing to see"
    assert counter("") == ""
    assert counter.counts() == {"email": 1, "phone": 1, "secret_key": 1}


def test_json_values_are_redacted_string_by_string_and_stay_valid_json() -> None:
    counter = CountingRedactor(body_redaction())
    value = [{"role": "user", "content": f'line\n{EMAIL}\\n{EMAIL} "{CANARY}"'}, 3, None]
    out = counter.json(value)
    text = json.dumps(out)
    assert EMAIL not in text
    assert CANARY not in text
    assert json.loads(text)[0]["role"] == "user"
    assert out[1:] == [3, None]
    assert counter.counts() == {"email": 2, "secret_key": 1}


def test_rule_names_come_from_the_configured_settings(monkeypatch) -> None:
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__BODY_REDACTION__RULES", '["email"]')
    monkeypatch.setenv(
        "SHADOWEVAL_CAPTURE__BODY_REDACTION__EXTRA_PATTERNS", '{"ticket": "TICKET-[0-9]+"}'
    )
    redaction = body_redaction()
    assert redaction.rules == ("email", "ticket")
    assert (
        redaction(f"{EMAIL} TICKET-42 {CANARY}") == f"[REDACTED:email] [REDACTED:ticket] {CANARY}"
    )


def test_manifest_counts_equal_the_body_redactors_own_hit_count(repo: Repository) -> None:
    seeded = seed_run(repo, canary=True)
    result = build_export(
        repo, make_request(seeded.run.run_id, per_task_type=50), redact=body_redaction()
    )
    ids = list(result.rows["exchange_id"])
    assert len(ids) == 22
    redactor = BodyRedactor(BodyRedactionSettings())
    hits = RedactionHits()
    for sample in repo.samples_by_ids(seeded.run.run_id, ids):
        redactor.redact_json(sample.request_messages, "request", hits)
        redactor.redact_text(sample.baseline_text, "baseline", hits)
        redactor.redact_text(sample.candidate_text, "candidate", hits)
        redactor.redact_json(sample.baseline_tool_calls, "baseline_tools", hits)
        redactor.redact_json(sample.candidate_tool_calls, "candidate_tools", hits)
    expected = hits.by_rule()
    assert expected["secret_key"] > 0
    assert expected["email"] > 0
    counts = result.manifest["redaction"]["counts"]
    assert counts == {rule: expected.get(rule, 0) for rule in redactor.rule_names}
