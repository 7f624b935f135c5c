"""An export request is checked when built; every bad value is named with the option."""

from __future__ import annotations

import pytest

from shadoweval.errors import ConfigError
from shadoweval.export import ExportRequest, cli_option, make_request, parse_flags
from shadoweval.pair_flags import PairFlag
from shadoweval.storage.samples import SampleFilter


def test_defaults_and_loose_values_are_normalized() -> None:
    request = make_request(
        "r",
        order=" Random ",
        seed=7,
        fmt="PARQUET",
        task_types=["chat", "extract", "chat"],
        flags=["format_regression", "CANDIDATE_ERROR", "format_regression"],
        min_similarity=-1.0,
        max_similarity=1,
    )
    assert request == ExportRequest(
        run_id="r",
        per_task_type=20,
        order="random",
        seed=7,
        fmt="parquet",
        flt=SampleFilter(
            task_types=("chat", "extract"),
            flags=(PairFlag.FORMAT_REGRESSION, PairFlag.CANDIDATE_ERROR),
            min_similarity=-1.0,
            max_similarity=1,
        ),
    )
    assert ExportRequest("r").fmt == "csv"
    assert ExportRequest("r").order == "lowest"


@pytest.mark.parametrize(
    ("kwargs", "option", "value"),
    [
        ({"per_task_type": 0}, "--per-task-type", "0"),
        ({"per_task_type": -3}, "--per-task-type", "-3"),
        ({"order": "highest"}, "--order", "'highest'"),
        ({"fmt": "xlsx"}, "--format", "'xlsx'"),
        ({"order": "random"}, "--seed", "--order random"),
        ({"seed": -1}, "--seed", "-1"),
        ({"per_task_type": 10**20}, "--per-task-type", "100000000000000000000"),
        ({"per_task_type": 1_000_001}, "--per-task-type", "1000001"),
        ({"order": "random", "seed": 10**23}, "--seed", "100000000000000000000000"),
        ({"order": "random", "seed": 2**64}, "--seed", "18446744073709551616"),
        ({"order": "random", "seed": 2**63}, "--seed", "9223372036854775808"),
        ({"seed": 7}, "--seed only applies to --order random", "--seed 7"),
        ({"order": "lowest", "seed": 0}, "--seed only applies", "--order lowest"),
        ({"min_similarity": 1.5}, "--min-similarity", "1.5"),
        ({"max_similarity": -1.01}, "--max-similarity", "-1.01"),
        ({"max_similarity": float("nan")}, "--max-similarity", "nan"),
        ({"min_similarity": 0.6, "max_similarity": 0.4}, "--min-similarity", "0.6"),
        ({"flags": ["format_regresion"]}, "--flag", "'format_regresion'"),
        ({"task_types": [" "]}, "--task-type", "' '"),
    ],
)
def test_bad_values_name_the_option_and_the_value(
    kwargs: dict[str, object], option: str, value: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_request("r", names=cli_option, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert option in message
    assert value in message


def test_unknown_flag_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known flags: candidate_error") as caught:
        parse_flags(["nope"])
    assert caught.value.field == "flag"
    assert caught.value.value == "nope"


def test_the_bounds_themselves_are_accepted() -> None:
    request = make_request("r", per_task_type=1_000_000, order="random", seed=2**63 - 1)
    assert (request.per_task_type, request.seed) == (1_000_000, 2**63 - 1)
    assert make_request("r", per_task_type=1, order="random", seed=0).seed == 0


def test_the_dataclass_checks_itself_too() -> None:
    with pytest.raises(ConfigError, match="seed only applies to order random"):
        ExportRequest("r", seed=3)
    with pytest.raises(ConfigError, match="seed 9223372036854775808"):
        ExportRequest("r", order="random", seed=2**63)
    with pytest.raises(ConfigError, match="per_task_type 1000001"):
        ExportRequest("r", per_task_type=1_000_001)
    with pytest.raises(ConfigError, match="per_task_type 0"):
        ExportRequest("r", per_task_type=0)
    with pytest.raises(ConfigError, match="order random needs seed"):
        ExportRequest("r", order="random")
    with pytest.raises(ConfigError, match="format 'xml'"):
        ExportRequest("r", fmt="xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_similarity 2"):
        ExportRequest("r", flt=SampleFilter(max_similarity=2.0))


def test_changed_unjudged_is_recorded_and_exchange_ids_are_a_frozenset() -> None:
    request = make_request("r", changed_unjudged=True)
    assert request.changed_unjudged is True
    assert request.exchange_ids is None
    restricted = ExportRequest("r", changed_unjudged=True, exchange_ids={"a", "b"})  # type: ignore[arg-type]
    assert restricted.exchange_ids == frozenset({"a", "b"})
    assert hash(restricted) == hash(
        ExportRequest("r", changed_unjudged=True, exchange_ids=frozenset({"b", "a"}))
    )
    assert make_request("r").changed_unjudged is False


def test_bad_changed_unjudged_and_exchange_ids_are_named() -> None:
    with pytest.raises(ConfigError, match="changed_unjudged 'yes' must be true or false"):
        ExportRequest("r", changed_unjudged="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exchange_ids holds 1 value") as caught:
        ExportRequest("r", exchange_ids=frozenset({"a", ""}))
    assert caught.value.field == "exchange_ids"
