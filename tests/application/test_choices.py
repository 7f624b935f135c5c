"""enum_choice: a user's pick among an enum's values, or a ConfigError naming field and value."""

from __future__ import annotations

import pytest

from shadoweval.application.choices import enum_choice
from shadoweval.errors import ConfigError
from shadoweval.records import JudgementSource, LabelValue


def test_a_value_or_a_member_picks_the_member() -> None:
    assert enum_choice(JudgementSource, "human", field="source") is JudgementSource.HUMAN
    assert enum_choice(LabelValue, LabelValue.SAME, field="label") is LabelValue.SAME


def test_an_unknown_value_names_the_field_the_value_and_the_known_values() -> None:
    with pytest.raises(ConfigError) as caught:
        enum_choice(JudgementSource, "robot", field="source")
    known = ", ".join(s.value for s in JudgementSource)
    assert str(caught.value) == f"source 'robot' is not one of {known}"
    assert caught.value.field == "source"
    assert caught.value.value == "robot"
