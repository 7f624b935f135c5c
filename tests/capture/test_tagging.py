"""Task type: header, else the first matching rule, else ``default``."""

from __future__ import annotations

from typing import Any

import pytest

from shadoweval.capture.tagging import TagSource, TaskTagger, rule_matches, valid_task_type
from shadoweval.config import TaskTypeRule

CHAT = "/v1/chat/completions"

RULES = (
    TaskTypeRule(task_type="extraction", has_response_format=True),
    TaskTypeRule(task_type="agent", has_tools=True),
    TaskTypeRule(task_type="support", metadata_field="team", metadata_value="support"),
    TaskTypeRule(task_type="legacy", route="/v1/completions"),
    TaskTypeRule(task_type="small", model="tiny-1"),
)


@pytest.fixture
def tagger() -> TaskTagger:
    return TaskTagger("X-Task-Type", RULES)


def test_valid_header_wins_over_rules(tagger: TaskTagger) -> None:
    tag = tagger.tag(route=CHAT, header_value="summarize.v2", body={"tools": [{"x": 1}]})
    assert (tag.task_type, tag.source, tag.rejected_header) == (
        "summarize.v2",
        TagSource.HEADER,
        False,
    )


@pytest.mark.parametrize("value", ["", "has space", "a/b", "<script>", "x" * 65, "naïve"])
def test_invalid_header_is_ignored_and_reported(tagger: TaskTagger, value: str) -> None:
    tag = tagger.tag(route=CHAT, header_value=value, body={"tools": [{"x": 1}]})
    assert (tag.task_type, tag.source, tag.rejected_header) == ("agent", TagSource.RULE, True)
    tag = tagger.tag(route=CHAT, header_value=value, body={})
    assert (tag.task_type, tag.source, tag.rejected_header) == ("default", TagSource.DEFAULT, True)


def test_first_matching_rule_wins(tagger: TaskTagger) -> None:
    body = {"response_format": {"type": "json_object"}, "tools": [{"x": 1}]}
    tag = tagger.tag(route=CHAT, header_value=None, body=body)
    assert (tag.task_type, tag.rule_index) == ("extraction", 0)


@pytest.mark.parametrize(
    ("route", "body", "expected"),
    [
        (CHAT, {"response_format": {"type": "json_schema", "json_schema": {}}}, "extraction"),
        (CHAT, {"response_format": {"type": "text"}}, "default"),  # text is not structured
        (CHAT, {"tools": []}, "default"),  # an empty list offers no tool
        (CHAT, {"functions": [{"name": "f"}]}, "agent"),  # legacy functions
        (CHAT, {"metadata": {"team": "support"}}, "support"),
        (CHAT, {"metadata": {"team": "sales"}}, "default"),
        (CHAT, {"metadata": "team=support"}, "default"),
        ("/v1/completions", {"prompt": "x"}, "legacy"),
        (CHAT, {"model": "tiny-1"}, "small"),
        (CHAT, None, "default"),  # body not a JSON object
    ],
)
def test_rule_conditions(
    tagger: TaskTagger, route: str, body: dict[str, Any] | None, expected: str
) -> None:
    assert tagger.tag(route=route, header_value=None, body=body).task_type == expected


def test_every_condition_of_a_rule_must_hold() -> None:
    rule = TaskTypeRule(task_type="x", route=CHAT, has_tools=False, model="m")
    assert rule_matches(rule, route=CHAT, body={"model": "m"})
    assert not rule_matches(rule, route=CHAT, body={"model": "m", "tools": [{}]})
    assert not rule_matches(rule, route="/v1/completions", body={"model": "m"})
    assert rule_matches(TaskTypeRule(task_type="all"), route="/any", body=None)  # catch-all


def test_metadata_values_compare_as_text() -> None:
    rule = TaskTypeRule(task_type="x", metadata_field="tier", metadata_value="2")
    assert rule_matches(rule, route=CHAT, body={"metadata": {"tier": 2}})
    flag = TaskTypeRule(task_type="x", metadata_field="beta", metadata_value="true")
    assert rule_matches(flag, route=CHAT, body={"metadata": {"beta": True}})
    present = TaskTypeRule(task_type="x", metadata_field="beta")
    assert rule_matches(present, route=CHAT, body={"metadata": {"beta": None}})
    any_field = TaskTypeRule(task_type="x", metadata_value="support")
    assert rule_matches(any_field, route=CHAT, body={"metadata": {"team": "support"}})


@pytest.mark.parametrize(
    ("value", "ok"),
    [("qa", True), ("a-b_c.d:e", True), ("x" * 64, True), ("x" * 65, False), ("a b", False)],
)
def test_valid_task_type(value: str, ok: bool) -> None:
    assert valid_task_type(value) is ok
