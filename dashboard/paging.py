"""Keyset paging state of the Samples page: a stack of cursor tokens.

The storage pages with opaque cursors (:class:`~shadoweval.storage.samples.SampleCursor`),
never ``OFFSET``: page ``k`` starts after the last pair of page ``k − 1``. Going forward
pushes the current page's ``next_cursor`` token; going back pops it. The stack is kept
in ``st.session_state`` as a list of tokens, together with the filter it was built for:
a different filter starts again at page 1.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from shadoweval.storage.samples import SampleCursor, SampleFilter

__all__ = ["CURSORS_KEY", "FILTER_KEY", "NEXT_KEY", "PAGE_SIZE", "CursorStack", "filter_key"]

PAGE_SIZE = 20
"""Samples per page."""

CURSORS_KEY = "samples.cursors"
FILTER_KEY = "samples.filter"
NEXT_KEY = "samples.next"


class CursorStack:
    """The paging position of one session, stored in a mapping (``st.session_state``).

    ``tokens[k]`` is where page ``k + 2`` starts; the current page starts after
    ``tokens[-1]`` (or at the beginning when empty). Keys: :data:`CURSORS_KEY` (the
    tokens), :data:`FILTER_KEY` (the filter they belong to) and ``samples.next`` (the
    shown page's next-cursor token, or ``None`` on the last page).
    """

    def __init__(self, state: MutableMapping[Any, Any]) -> None:
        self._state = state

    def sync(self, key: object) -> None:
        """Start again at page 1 when ``key`` (the run and filter) is not the stored one."""
        if self._state.get(FILTER_KEY) != key:
            self._state[FILTER_KEY] = key
            self._state[CURSORS_KEY] = []
            self._state[NEXT_KEY] = None

    @property
    def tokens(self) -> list[str]:
        """The stack, oldest first."""
        tokens: list[str] = self._state.setdefault(CURSORS_KEY, [])
        return tokens

    @property
    def page_number(self) -> int:
        """1-based number of the current page."""
        return len(self.tokens) + 1

    def current(self) -> SampleCursor | None:
        """Where the current page starts (``None``: the first page).

        Raises:
            RecordDecodeError: a stored token is not a cursor.
        """
        tokens = self.tokens
        return SampleCursor.from_token(tokens[-1]) if tokens else None

    def shown(self, next_cursor: SampleCursor | None) -> None:
        """Record where the page just shown ends (``None``: it was the last page)."""
        self._state[NEXT_KEY] = None if next_cursor is None else next_cursor.to_token()

    @property
    def has_next(self) -> bool:
        """True when the page shown has a next page."""
        return self._state.get(NEXT_KEY) is not None

    def forward(self) -> None:
        """Go to the next page (a button callback); nothing on the last page."""
        token = self._state.get(NEXT_KEY)
        if token is not None:
            self.tokens.append(token)
            self._state[NEXT_KEY] = None

    def back(self) -> None:
        """Go to the previous page (a button callback); nothing on page 1."""
        if self.tokens:
            self.tokens.pop()
            self._state[NEXT_KEY] = None


def filter_key(run_id: str, flt: SampleFilter) -> tuple[object, ...]:
    """The identity of a paging sequence: the run and every filter field."""
    return (
        run_id,
        flt.task_types,
        tuple(f.value for f in flt.flags),
        flt.min_similarity,
        flt.max_similarity,
    )
