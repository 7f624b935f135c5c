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

A request may instead ask for **the random label sample** (``ppi_sample``): a seeded,
uniform draw from *all* changed pairs of each task type, judged or not (the population
the judge predicts on), whose labels the net-harm estimator may use as the labelled
sample of prediction-powered inference (PPI++, Angelopoulos, Duchi & Zrnic 2023). The
application layer attaches the changed pairs' ids as ``exchange_ids`` here too. Such a
request is a random draw: it refuses ``order lowest``, similarity bounds, flag filters
and ``changed_unjudged`` (each would make the sample not random over the changed pairs);
without a seed, :func:`make_request` draws one (:func:`secrets.randbelow`) and the
manifest records it. The size is ``per_task_type`` N, or ``fraction`` F of each task
type's pairs (:meth:`ExportRequest.pairs_to_draw`: ``ceil(F × pairs)``, F read as the
decimal it is written as).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
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

PPI_POPULATION = "changed pairs per task type"
"""What the random label sample is drawn from (the manifest's ``ppi_sample.population``)."""

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


def _check_fraction(fraction: object, names: FieldNames) -> None:
    """Raise :class:`ConfigError` unless ``fraction`` is ``None`` or a number in (0, 1]."""
    if fraction is None:
        return
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not (math.isfinite(fraction) and 0 < fraction <= 1)
    ):
        raise ConfigError(
            f"{names('fraction')} {fraction!r} must be a number in (0, 1] (0.1: a tenth of "
            "each task type's pairs, rounded up)",
            field="fraction",
            value=fraction,
        )


def _check_ppi(
    order: str,
    bounds: tuple[float | None, float | None],
    flags: Sequence[PairFlag],
    changed_unjudged: bool,
    names: FieldNames,
) -> None:
    """Raise :class:`ConfigError` for the first selection a random label sample refuses:
    anything but a uniform draw over each task type's changed pairs (``order`` not random,
    a similarity bound of ``bounds`` = ``(min_similarity, max_similarity)``, a flag,
    ``changed_unjudged``)."""
    min_similarity, max_similarity = bounds
    refused: list[tuple[str, object]] = []
    if order != "random":
        refused.append(("order", order))
    if min_similarity is not None:
        refused.append(("min_similarity", min_similarity))
    if max_similarity is not None:
        refused.append(("max_similarity", max_similarity))
    refused.extend(("flag", flag.value) for flag in flags)
    if changed_unjudged:
        refused.append(("changed_unjudged", True))
    if refused:
        name, value = refused[0]
        shown = "" if value is True else f" {value}"
        raise ConfigError(
            f"{names('ppi_sample')} cannot be combined with {names(name)}{shown}: the random "
            "label sample is a uniform draw over all changed pairs of each task type, and "
            f"{names(name)} would make it not random over them (export it separately, "
            "without the random label sample)",
            field=name,
            value=value,
        )


def ppi_sample_id(seed: int, *, per_task_type: int, fraction: float | None) -> str:
    """The id of a random label sample: ``ppi-seed-<seed>-n-<N>`` or
    ``ppi-seed-<seed>-fraction-<F>`` (F as Python writes the float, ``0.1``).

    The same seed and size over the same changed pairs give the same draw, and so the
    same id (importing the labels of that draw again marks them with the same sample).
    """
    size = f"n-{per_task_type}" if fraction is None else f"fraction-{fraction!r}"
    return f"ppi-seed-{seed}-{size}"


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
            top of ``flt``. The application layer sets it for ``changed_unjudged`` and
            ``ppi_sample`` (:func:`shadoweval.application.exporting.resolve_selection`); the
            manifest records how many ids it held.
        fraction: F in (0, 1]: take ``ceil(F × pairs)`` of each task type's matching pairs
            instead of ``per_task_type`` (:meth:`pairs_to_draw`); ``None``: N.
        ppi_sample: the random label sample for prediction-powered inference: a seeded
            random draw from every changed pair of each task type (judged or not);
            refuses ``order lowest``, similarity bounds, flags and ``changed_unjudged``.
            The manifest records its id (:func:`ppi_sample_id`), population, seed,
            fraction and the exchange ids drawn (``ppi_sample``).

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
    fraction: float | None = None
    ppi_sample: bool = False

    def pairs_to_draw(self, matching: int) -> int:
        """How many of a task type's ``matching`` pairs to take: N (``per_task_type``), or
        ``ceil(F × matching)`` with F exact as written (``0.1`` is 1/10, so 10% of 30 is
        3, not 4) — at least one of any non-empty task type; 0 of none. A random label
        sample (``ppi_sample``) takes at least two of a task type with two or more (the
        prediction-powered estimate needs a spread per task type: a stratum with one label
        of several changed pairs has none, :mod:`shadoweval.stats.net_harm.ppi`)."""
        if self.fraction is None:
            drawn = self.per_task_type
        else:
            drawn = math.ceil(Fraction(repr(self.fraction)) * matching)
        return max(drawn, min(2, matching)) if self.ppi_sample else drawn

    @property
    def sample_id(self) -> str | None:
        """:func:`ppi_sample_id` of a random label sample; ``None`` for any other export."""
        if not self.ppi_sample or self.seed is None:
            return None
        return ppi_sample_id(self.seed, per_task_type=self.per_task_type, fraction=self.fraction)

    def __post_init__(self) -> None:
        if not isinstance(self.raw_cells, bool):
            raise ConfigError(
                f"raw_cells {self.raw_cells!r} must be true or false",
                field="raw_cells",
                value=self.raw_cells,
            )
        for name in ("changed_unjudged", "ppi_sample"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{name} {getattr(self, name)!r} must be true or false",
                    field=name,
                    value=getattr(self, name),
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
        _check_fraction(self.fraction, _same)
        if self.ppi_sample:
            flt = self.flt
            bounds = (flt.min_similarity, flt.max_similarity)
            _check_ppi(self.order, bounds, flt.flags, self.changed_unjudged, _same)


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
    per_task_type: int | None = None,
    order: str | None = None,
    seed: int | None = None,
    fmt: str = "csv",
    task_types: Sequence[str] = (),
    flags: Sequence[str] = (),
    min_similarity: float | None = None,
    max_similarity: float | None = None,
    changed_unjudged: bool = False,
    raw_cells: bool = False,
    fraction: float | None = None,
    ppi_sample: bool = False,
    names: FieldNames = _same,
) -> ExportRequest:
    """Build and check an :class:`ExportRequest` from loose values.

    ``order`` and ``fmt`` are matched case-insensitively; task types are kept as given
    (repeats dropped, blanks refused). ``raw_cells`` turns off the CSV's formula
    escaping (:attr:`ExportRequest.raw_cells`). ``changed_unjudged`` and ``ppi_sample``
    are only recorded here: the application layer attaches their exchange ids before the
    export is built (:func:`shadoweval.application.exporting.resolve_selection`).

    ``per_task_type`` ``None`` is :data:`DEFAULT_PER_TASK_TYPE` unless ``fraction`` is
    given (both at once are refused). ``order`` ``None`` is ``lowest``, or ``random`` for
    ``ppi_sample``; a ``ppi_sample`` without a seed gets one drawn with
    :func:`secrets.randbelow` in [0, :data:`MAX_SEED`] (recorded in the manifest).

    Raises:
        ConfigError: the first bad value, named as ``names(field)`` with the value; for
            ``ppi_sample``, the first filter it refuses (``order lowest``, a similarity
            bound, a flag, ``changed_unjudged``).
    """
    order = ("random" if ppi_sample else "lowest") if order is None else order.strip().lower()
    fmt = fmt.strip().lower()
    if fraction is not None and per_task_type is not None:
        raise ConfigError(
            f"{names('fraction')} {fraction!r} and {names('per_task_type')} {per_task_type!r} "
            "both say how many pairs to take: give one",
            field="fraction",
            value=fraction,
        )
    _check_fraction(fraction, names)
    kept: list[str] = []
    for task_type in task_types:
        if not task_type.strip():
            raise ConfigError(
                f"{names('task_type')} {task_type!r} is blank", field="task_type", value=task_type
            )
        if task_type not in kept:
            kept.append(task_type)
    parsed_flags = parse_flags(flags, names=names)
    if ppi_sample:
        bounds = (min_similarity, max_similarity)
        _check_ppi(order, bounds, parsed_flags, changed_unjudged, names)
        if seed is None:
            seed = secrets.randbelow(MAX_SEED + 1)
    per_task_type = DEFAULT_PER_TASK_TYPE if per_task_type is None else per_task_type
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
        fraction=fraction,
        ppi_sample=ppi_sample,
    )
