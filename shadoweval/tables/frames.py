"""Tables in memory without pandas: :class:`RecordFrame`, and which kind a reader makes.

pandas is an extra (``shadow-eval[tables]``): the light install (``pip install
shadow-eval``) serves ``mock-llm`` from JSON, JSON Lines and CSV/TSV tables without it. When
pandas is installed every table is read and built through pandas, exactly as before the
extras existed; without it the readers of :mod:`shadoweval.tables.plain_reader` return a
:class:`RecordFrame`, which offers the two things the row mapping reads from a table:
its ``columns`` and ``to_dict(orient="records")``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pandas as pd

TABLES_EXTRA = "tables"
"""The extra that brings pandas and pyarrow: ``pip install 'shadow-eval[tables]'``."""


def pandas_installed() -> bool:
    """True when pandas can be imported (the ``tables`` extra or more is installed).

    Looks the package up without importing it, so asking costs no pandas import.
    """
    return importlib.util.find_spec("pandas") is not None


class RecordFrame:
    """A table as a list of row dicts: the light install's stand-in for a DataFrame.

    Attributes:
        columns: the column names, in the order they were first seen.

    Every row holds every column; a cell a row lacks is ``None`` (as pandas' missing
    marker becomes ``None`` in :func:`~shadoweval.tables.values.to_python`).
    """

    __slots__ = ("_records", "columns")

    def __init__(
        self, records: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None
    ) -> None:
        rows = [dict(record) for record in records]
        if columns is None:
            seen: dict[str, None] = {}
            for row in rows:
                seen.update(dict.fromkeys(row))
            columns = list(seen)
        self.columns: list[str] = list(columns)
        self._records: list[dict[Hashable, Any]] = [
            {column: row.get(column) for column in self.columns} for row in rows
        ]

    def __len__(self) -> int:
        return len(self._records)

    def to_dict(self, orient: Literal["records"] = "records") -> list[dict[Hashable, Any]]:
        """The rows as ``{column: value}`` dicts (copies), typed as ``DataFrame.to_dict``'s."""
        return [dict(row) for row in self._records]


def new_frame(
    records: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> pd.DataFrame | RecordFrame:
    """A table built from row dicts: a pandas DataFrame when pandas is installed, else a
    :class:`RecordFrame` (``columns``: the column order; default: as first seen)."""
    if pandas_installed():
        import pandas as pd

        return pd.DataFrame(list(records), columns=None if columns is None else list(columns))
    return RecordFrame(records, columns)
