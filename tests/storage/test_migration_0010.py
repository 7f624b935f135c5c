"""Migration 0010: replay outcomes stored unredacted (before issue 30) are redacted in place,
on SQLite and PostgreSQL, and the migration says how many fields it changed."""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa
from alembic import command

from shadoweval.records import ReplayTarget, ToolCall
from shadoweval.storage import Database, Repository, head_revision
from shadoweval.storage.database import alembic_config
from shadoweval.storage.models import ReplayOutcomeRow

from .factories import BASELINE, CANDIDATE, make_exchange, make_outcome

EMAIL = "canary.cand@example.com"
KEY = "sk-live-CANARY0123456789abcdef"


def _old_way(database: Database, repo: Repository) -> str:
    """A run whose candidate and replica outcomes are written as before issue 30: the
    record as the target sent it, straight into the table (no repository redaction)."""
    run_id = repo.create_run(
        run_id="run-0010",
        name="old",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:p",
        policy_yaml="",
    ).run_id
    exchanges = [make_exchange(i) for i in (1, 2)]
    repo.save_exchanges(run_id, exchanges)
    rows = []
    for target in (ReplayTarget.CANDIDATE, ReplayTarget.BASELINE_REPEAT):
        outcome = make_outcome(
            run_id, exchanges[0].exchange_id, target=target, text=f"Mail {EMAIL}, key {KEY}."
        )
        assert outcome.response is not None
        call = ToolCall(index=0, name="send", arguments=f'{{"to": "{EMAIL}"}}')
        outcome = outcome.model_copy(
            update={"response": outcome.response.model_copy(update={"tool_calls": (call,)})}
        )
        rows.append(outcome)
    clean = make_outcome(run_id, exchanges[1].exchange_id)
    with database.connect() as conn:
        for o in [*rows, clean]:
            conn.execute(
                sa.insert(ReplayOutcomeRow).values(
                    run_id=o.run_id,
                    exchange_id=o.exchange_id,
                    target=o.target.value,
                    attempt=o.attempt,
                    error_kind=None,
                    warmup=False,
                    replayed_at=o.replayed_at,
                    e2e_ms=None,
                    ttft_ms=None,
                    ttfc_ms=None,
                    record=o.model_dump(mode="json"),
                )
            )
        conn.commit()
    return run_id


def _stored_text(database: Database) -> str:
    with database.connect() as conn:
        records = conn.execute(sa.text("SELECT record FROM replay_outcome")).scalars()
        return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records)


def test_upgrade_redacts_stored_outcomes_and_counts_fields(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    repo = Repository(database)
    run_id = _old_way(database, repo)
    with database.connect() as conn:
        command.downgrade(alembic_config(conn), "0009")
    before = _stored_text(database)
    assert before.count(EMAIL) == 4
    assert before.count(KEY) == 2

    with caplog.at_level(logging.INFO, logger="migrations.0010"), database.connect() as conn:
        command.upgrade(alembic_config(conn), "0010")
    assert database.current_revision() == "0010"
    assert head_revision() >= "0010"

    after = _stored_text(database)
    counts = {"email": after.count(EMAIL), "key": after.count(KEY)}
    assert counts == {"email": 0, "key": 0}, f"canaries left in replay_outcome: {counts}"
    # 2 outcomes × (response.text, response.tool_calls[0].arguments); the clean one untouched
    assert "4 field(s) changed in 2 outcome(s)" in caplog.text, caplog.text
    assert "3 outcome(s) stamped" in caplog.text  # the clean one carries the version too
    for outcome in repo.load_outcomes(run_id):
        assert outcome.redaction is not None
        assert outcome.redaction.rules_version is not None
        assert outcome.redaction.rules_version.startswith("body-rules/sha256:")
        if outcome.exchange_id == "ex-00002":
            assert outcome.redaction.hits == ()
            continue
        assert outcome.response is not None
        assert outcome.response.text is not None
        assert "[REDACTED:email]" in outcome.response.text
        assert "[REDACTED:secret_key]" in outcome.response.text
    # A second upgrade pass (down and up again) finds nothing left to change.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="migrations.0010"), database.connect() as conn:
        command.downgrade(alembic_config(conn), "0009")
        command.upgrade(alembic_config(conn), "0010")
    assert "0 field(s) changed in 0 outcome(s); 0 outcome(s) stamped" in caplog.text
