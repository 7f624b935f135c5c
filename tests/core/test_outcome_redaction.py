"""OutcomeRedactor: a replay outcome through the capture sidecar's body rules (issue 30)."""

from __future__ import annotations

from shadoweval.config import BodyRedactionSettings
from shadoweval.outcome_redaction import OutcomeRedactor
from shadoweval.records import (
    HeaderPair,
    ModelIdentity,
    ReplayErrorKind,
    ReplayOutcome,
    ResponseRecord,
    ToolCall,
)

EMAIL = "canary.cand@example.com"
KEY = "sk-live-CANARY0123456789abcdef"


def _outcome(**response: object) -> ReplayOutcome:
    return ReplayOutcome(
        run_id="r",
        exchange_id="e",
        model=ModelIdentity(name="m"),
        response=ResponseRecord(status_code=200, **response),
    )


def test_every_answer_field_is_redacted_and_the_version_stored() -> None:
    redactor = OutcomeRedactor()
    outcome = _outcome(
        text=f"mail {EMAIL}",
        reasoning_text=f"key {KEY}",
        tool_calls=(ToolCall(index=0, name="f", arguments=f'{{"to": "{EMAIL}"}}'),),
        body=f'{{"content": "mail {EMAIL}"}}',
        headers=(HeaderPair(name="set-cookie", value=KEY), HeaderPair(name="x-ok", value="1")),
    )
    out = redactor.redact(outcome)
    dumped = out.model_dump_json()
    assert EMAIL not in dumped
    assert KEY not in dumped
    assert out.response is not None
    assert out.response.text == "mail [REDACTED:email]"
    assert out.response.headers == (HeaderPair(name="x-ok", value="1"),)
    assert out.redaction is not None
    assert out.redaction.rules_version == redactor.version
    assert out.redaction.headers_removed == ("set-cookie",)
    assert redactor.fields_changed(out.redaction) == 5  # 4 fields + 1 header
    assert redactor.redact(out) is out  # same version: nothing to do


def test_a_streamed_raw_body_is_dropped_when_a_reassembled_field_fired() -> None:
    split = f'data: {{"delta": "canary.cand@"}}\n\ndata: {{"delta": "example.com {KEY[:9]}"}}\n\n'
    out = OutcomeRedactor().redact(_outcome(text=f"{EMAIL}", body=split, streamed=True))
    assert out.response is not None
    assert out.response.body is None
    assert out.redaction is not None
    assert ("raw_body_dropped", "response.body") in {
        (h.rule, h.location) for h in out.redaction.hits
    }


def test_error_texts_lose_url_credentials_and_secrets() -> None:
    outcome = ReplayOutcome(
        run_id="r",
        exchange_id="e",
        model=ModelIdentity(name="m"),
        error_kind=ReplayErrorKind.CONNECT,
        error_detail=f"connect https://user:pw@host/v1 failed; Bearer {KEY}",
    )
    out = OutcomeRedactor().redact(outcome)
    assert out.error_detail is not None
    assert "user:pw" not in out.error_detail
    assert KEY not in out.error_detail


def test_configured_rules_give_another_version() -> None:
    extra = BodyRedactionSettings(extra_patterns={"ticket": r"TICKET-\d+"})
    configured = OutcomeRedactor(extra)
    assert configured.version != OutcomeRedactor().version
    out = configured.redact(_outcome(text="see TICKET-42"))
    assert out.response is not None
    assert out.response.text == "see [REDACTED:ticket]"
