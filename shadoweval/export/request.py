"""What an export asks for: run, stratum size, order, seed, filter and file format.

:class:`ExportRequest` is checked when it is built; :func:`make_request` builds one from
the loose values a command line or a query string gives (flag names as text), and names
each bad value the way its caller spelled the option (``--per-task-type`` on the command
line, ``per_task_type`` in the API) through ``names``.

A request may also ask for the pairs that changed and have no quality judgement yet
(``changed_unjudged``). Which pairs those are is a statistical question (the change
classification of :mod:`shadoweval.stats.change` under the run's frozen policy, and the stored
judgements and labels), which this stage does not answer: the application layer computes
the exchange ids and attaches them as ``exchange_ids``
(:func:`shadoweval.application.exporting.resolve_selection`); :func:`export.build_export` then keeps
only those ids, and refuses a ``changed_unjudged`` request whose ids were never attached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from shadoweval.errors import ConfigError
from shadoweval.pair_flags import PairFlag
from shadoweval.storage.samples import SampleFilter

ExportFormat = Literal["csv", "jsonl", "parquet"]
"""File format of ``samples.<ext>``."""
ExportOrder = Literal["lowest", "random"]
"""``lowest``: the first N pairs in page order; ``random``: a seeded draw without replacement."""

FORMATS: tuple[str, ...] = get_args(ExportFormat)
ORDERS: tuple[str, ...] = get_args(ExportOrder)
DEFAULT_PER_TASK_TYPE = 20
"""Pairs per task type when the caller does not say."""
MAX_PER_TASK_TYPE = 1_000_000
"""Most pairs per task type any export may ask for (the API has a lower cap of its own)."""
MAX_SEED = 2**63 - 1
"""Largest seed: the manifest is JSON with 64-bit integers, so seeds are in [0, 2**63 - 1]."""

FieldNames = Callable[[str], str]
"""Maps a request field (``per_task_type``, ``min_similarity`` …) to the caller's name."""


def _same(field: str) -> str:
    return field


def cli_option(field: str) -> str:
    """The command-line option of a request field: ``per_task_type`` → ``--per-task-type``."""
    return "--" + field.replace("_", "-")


def _check(
    *,
    per_task_type: object,
    order: object,
    seed: object,
    fmt: object,
    min_similarity: float | None,
    max_similarity: float | None,
    names: FieldNames,
) -> None:
    """Raise :class:`ConfigError` for the first bad value (the message names it)."""
    if (
        isinstance(per_task_type, bool)
        or not isinstance(per_task_type, int)
        or not 1 <= per_task_type <= MAX_PER_TASK_TYPE
    ):
        raise ConfigError(
            f"{names('per_task_type')} {per_task_type!r} must be an integer from 1 to "
            f"{MAX_PER_TASK_TYPE}",
            field="per_task_type",
            value=per_task_type,
        )
    if order not in ORDERS:
        raise ConfigError(
            f"{names('order')} {order!r} is not one of {', '.join(ORDERS)}",
            field="order",
            value=order,
        )
    if fmt not in FORMATS:
        raise ConfigError(
            f"{names('format')} {fmt!r} is not one of {', '.join(FORMATS)}",
            field="format",
            value=fmt,
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise ConfigError(
            f"{names('seed')} {seed!r} must be an integer from 0 to 2**63 - 1 ({MAX_SEED})",
            field="seed",
            value=seed,
        )
    if seed is not None and order != "random":
        raise ConfigError(
            f"{names('seed')} only applies to {names('order')} random (got "
            f"{names('seed')} {seed!r} with {names('order')} {order})",
            field="seed",
            value=seed,
        )
    if order == "random" and seed is None:
        raise ConfigError(
            f"{names('order')} random needs {names('seed')} (the seed is recorded in the "
            "manifest so the same sample can be drawn again)",
            field="seed",
            value=None,
        )
    for name, bound in (("min_similarity", min_similarity), ("max_similarity", max_similarity)):
        if bound is not None and not (math.isfinite(bound) and -1.0 <= bound <= 1.0):
            raise ConfigError(
                f"{names(name)} {bound!r} is outside [-1, 1] (similarity is a cosine)",
                field=name,
                value=bound,
            )
    if (
        min_similarity is not None
        and max_similarity is not None
        and min_similarity > max_similarity
    ):
        raise ConfigError(
            f"{names('min_similarity')} {min_similarity!r} is greater than "
            f"{names('max_similarity')} {max_similarity!r}",
            field="min_similarity",
            value=min_similarity,
        )


@dataclass(frozen=True, slots=True)
class ExportRequest:
    """One export: up to ``per_task_type`` pairs of each task type of ``run_id``.

    Attributes:
        run_id: the run exported.
        per_task_type: N, the most pairs exported per task type (1 to
            :data:`MAX_PER_TASK_TYPE`).
        order: ``lowest`` — the first N matching pairs in page order (pairs without a
            similarity first, then by similarity ascending, then exchange id); ``random`` —
            N pairs drawn without replacement with ``numpy.random.default_rng(seed)``.
        seed: the random draw's seed (required for ``random`` and refused with
            ``lowest``; in [0, :data:`MAX_SEED`]; recorded in the manifest).
        flt: which pairs match (task types, flags that must all be set, similarity band).
        fmt: ``csv``, ``jsonl`` or ``parquet``.
        raw_cells: write CSV cells as they are. By default a text cell that starts like a
            spreadsheet formula (``=``, ``+``, ``-``, ``@``, tab, CR, LF) gets a leading
            ``'`` and text cells are quoted (:func:`shadoweval.export.writer.escape_formula`); JSONL
            and Parquet are never escaped. Recorded in the manifest (``cells``).
        changed_unjudged: only pairs that changed beyond the noise (:mod:`shadoweval.stats.change`
            under the run's frozen policy) and have no successful quality judgement of any
            source (judge, human label, reference) — a failed judgement leaves a pair
            unjudged. Recorded in the manifest's filters.
        exchange_ids: an explicit restriction to these exchange ids (``None``: none), on
            top of ``flt``. The application layer sets it for ``changed_unjudged``
            (:func:`shadoweval.application.exporting.resolve_selection`); the manifest records how
            many ids it held.

    Raises:
        ConfigError: a bad value; ``field`` and ``value`` name it.
    """

    run_id: str
    per_task_type: int = DEFAULT_PER_TASK_TYPE
    order: ExportOrder = "lowest"
    seed: int | None = None
    flt: SampleFilter = field(default_factory=SampleFilter)
    fmt: ExportFormat = "csv"
    changed_unjudged: bool = False
    exchange_ids: frozenset[str] | None = None
    raw_cells: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.raw_cells, bool):
            raise ConfigError(
                f"raw_cells {self.raw_cells!r} must be true or false",
                field="raw_cells",
                value=self.raw_cells,
            )
        if not isinstance(self.changed_unjudged, bool):
            raise ConfigError(
                f"changed_unjudged {self.changed_unjudged!r} must be true or false",
                field="changed_unjudged",
                value=self.changed_unjudged,
            )
        if self.exchange_ids is not None:
            ids = frozenset(self.exchange_ids)
            bad = sorted(repr(i) for i in ids if not isinstance(i, str) or not i)
            if bad:
                raise ConfigError(
                    f"exchange_ids holds {len(bad)} value(s) that are not exchange ids: "
                    f"{', '.join(bad[:5])}",
                    field="exchange_ids",
                    value=bad[0],
                )
            object.__setattr__(self, "exchange_ids", ids)
        _check(
            per_task_type=self.per_task_type,
            order=self.order,
            seed=self.seed,
            fmt=self.fmt,
            min_similarity=self.flt.min_similarity,
            max_similarity=self.flt.max_similarity,
            names=_same,
        )


def parse_flags(values: Sequence[str], *, names: FieldNames = _same) -> tuple[PairFlag, ...]:
    """Flag names → :class:`PairFlag` members (order kept, repeats dropped).

    Raises:
        ConfigError: a name that is not a flag; the message lists the known flags.
    """
    flags: list[PairFlag] = []
    for value in values:
        try:
            flag = PairFlag(value.strip().lower())
        except ValueError:
            known = ", ".join(f.value for f in PairFlag)
            raise ConfigError(
                f"{names('flag')} {value!r} is not a pair flag; known flags: {known}",
                field="flag",
                value=value,
            ) from None
        if flag not in flags:
            flags.append(flag)
    return tuple(flags)


def make_request(
    run_id: str,
    *,
    per_task_type: int = DEFAULT_PER_TASK_TYPE,
    order: str = "lowest",
    seed: int | None = None,
    fmt: str = "csv",
    task_types: Sequence[str] = (),
    flags: Sequence[str] = (),
    min_similarity: float | None = None,
    max_similarity: float | None = None,
    changed_unjudged: bool = False,
    raw_cells: bool = False,
    names: FieldNames = _same,
) -> ExportRequest:
    """Build and check an :class:`ExportRequest` from loose values.

    ``order`` and ``fmt`` are matched case-insensitively; task types are kept as given
    (repeats dropped, blanks refused). ``raw_cells`` turns off the CSV's formula
    escaping (:attr:`ExportRequest.raw_cells`). ``changed_unjudged`` is only recorded here: the
    application layer attaches its exchange ids before the export is built
    (:func:`shadoweval.application.exporting.resolve_selection`).

    Raises:
        ConfigError: the first bad value, named as ``names(field)`` with the value.
    """
    order = order.strip().lower()
    fmt = fmt.strip().lower()
    kept: list[str] = []
    for task_type in task_types:
        if not task_type.strip():
            raise ConfigError(
                f"{names('task_type')} {task_type!r} is blank", field="task_type", value=task_type
            )
        if task_type not in kept:
            kept.append(task_type)
    parsed_flags = parse_flags(flags, names=names)
    _check(
        per_task_type=per_task_type,
        order=order,
        seed=seed,
        fmt=fmt,
        min_similarity=min_similarity,
        max_similarity=max_similarity,
        names=names,
    )
    return ExportRequest(
        run_id=run_id,
        per_task_type=per_task_type,
        order=cast(ExportOrder, order),
        seed=seed,
        flt=SampleFilter(
            task_types=tuple(kept),
            flags=parsed_flags,
            min_similarity=min_similarity,
            max_similarity=max_similarity,
        ),
        fmt=cast(ExportFormat, fmt),
        changed_unjudged=changed_unjudged,
        raw_cells=raw_cells,
    )
