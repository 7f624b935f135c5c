"""One lifecycle for every long-lived object: start once, stop once, never restart.

Clients, producers, consumers, sinks, the capture pipeline, the sidecar, the replay worker
and the background servers all follow the same rules:

* ``start()`` acquires what the object holds (connections, threads, tasks, sockets);
  ``stop()`` releases it. They are ``async`` where the object lives on an event loop.
* ``async with obj`` (``with obj`` for a synchronous object) calls ``start()`` on entry
  and ``stop()`` on exit; entering returns the object.
* A second ``start()`` raises :class:`~shadoweval.errors.LifecycleError` ("called
  twice"); so does a ``start()`` after ``stop()`` ("cannot be restarted"): **a stopped
  object is not restartable** — make a new one.
* A ``start()`` that raises leaves the object as if never started, so it may be started
  again (the Kafka sink retries its producer's start until the broker answers).
* ``stop()`` is idempotent and never raises for the lifecycle: on an already-stopped
  object it does nothing; on a never-started one it releases nothing and marks the object
  stopped (a start afterwards raises, as after any stop).

:class:`Lifecycle` is the state guard that writes these rules once; :class:`AsyncLifecycle`
adds ``async with`` for objects whose ``stop()`` takes no argument, :class:`SyncLifecycle`
``with`` for objects whose ``start()``/``stop()`` are synchronous. The guard is checked
in ``start()``/``stop()`` only, never on a request path.

:func:`cancel_tasks` ends an object's background tasks in its ``stop()``.
:func:`freeze_startup_heap` keeps a serving process's start-up objects out of the cyclic
garbage collector's full passes (the live path's pauses).

Objects that are usable from construction and only released once (a capture-log writer,
the disk spool, the database, the work locks) have no ``start()``: :class:`Closing` gives
them ``with obj``, which returns the object and calls its ``close()`` on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol, Self

from shadoweval.errors import LifecycleError


class LifecycleState(enum.Enum):
    """Where a long-lived object is in its one life."""

    NEW = "new"
    STARTED = "started"
    STOPPED = "stopped"


class Lifecycle:
    """Mixin holding the lifecycle state and its guard.

    A class calls :meth:`_starting` around the body of its ``start()`` and
    :meth:`_stopping` first in its ``stop()``::

        def start(self) -> None:
            with self._starting():
                ...  # acquire

        def stop(self) -> None:
            if not self._stopping():
                return  # never started, or already stopped
            ...  # release
    """

    _lifecycle_state: LifecycleState = LifecycleState.NEW

    @property
    def lifecycle_state(self) -> LifecycleState:
        """``NEW`` until started, ``STARTED`` until stopped, then ``STOPPED``."""
        return self._lifecycle_state

    @contextlib.contextmanager
    def _starting(self) -> Iterator[None]:
        """Guard a ``start()`` body: mark the object started, or undo it when the body raises.

        Raises:
            LifecycleError: already started, or stopped.
        """
        self._mark_started()
        try:
            yield
        except BaseException:
            self._lifecycle_state = LifecycleState.NEW
            raise

    def _mark_started(self, method: str = "start") -> None:
        """Mark the object started, with no undo: also for a ``method`` that runs the whole
        life (``run()``) and leaves the object stopped whatever happens.

        Raises:
            LifecycleError: already started, or stopped.
        """
        name = type(self).__name__
        if self._lifecycle_state is LifecycleState.STARTED:
            raise LifecycleError(f"{name}.{method}() called twice")
        if self._lifecycle_state is LifecycleState.STOPPED:
            raise LifecycleError(f"{name} cannot be restarted after stop()")
        self._lifecycle_state = LifecycleState.STARTED

    def _stopping(self) -> bool:
        """Mark the object stopped; return whether it was started (whether to release)."""
        was_started = self._lifecycle_state is LifecycleState.STARTED
        self._lifecycle_state = LifecycleState.STOPPED
        return was_started


class AsyncLifecycle(Lifecycle):
    """:class:`Lifecycle` plus ``async with`` for objects with ``async start()``/``stop()``."""

    async def start(self) -> None:
        """Acquire what the object holds (see the subclass)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Release what the object holds (see the subclass)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class Closing:
    """Mixin for an object that is usable once constructed and released by ``close()``:
    ``with obj`` returns the object itself and calls ``close()`` on exit (whether the block
    raised or not; an exception propagates)."""

    def close(self) -> None:
        """Release what the object holds (see the subclass)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SyncLifecycle(Lifecycle, Closing):
    """:class:`Lifecycle` plus ``with`` for objects with synchronous ``start()``/``stop()``:
    entering starts the object and returns it, leaving stops it (:class:`Closing`: whether
    the block raised or not; an exception propagates)."""

    def start(self) -> object:
        """Acquire what the object holds (see the subclass)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Release what the object holds (see the subclass)."""
        raise NotImplementedError

    def close(self) -> None:
        """:meth:`stop` (what leaving ``with obj`` calls)."""
        self.stop()

    def __enter__(self) -> Self:
        self.start()
        return self


async def cancel_tasks(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel each task that is still running and wait until it has ended (its
    cancellation is not raised); ``None`` and finished tasks are passed over."""
    for task in tasks:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class AsyncClosable(Protocol):
    """What :func:`aclose_all` closes: an object with ``async aclose()`` (an
    ``httpx.AsyncClient``, the raw HTTP/1.1 pool)."""

    async def aclose(self) -> None: ...


async def aclose_all(*closables: AsyncClosable | None) -> None:
    """Close each of ``closables`` in order (``await x.aclose()``); ``None`` is passed over."""
    for closable in closables:
        if closable is not None:
            await closable.aclose()


def freeze_startup_heap() -> int:
    """Move every object alive now into the cyclic garbage collector's permanent generation
    (:func:`gc.freeze`), so that its full (generation 2) passes scan only what the process
    created since.

    Call once a serving process is up (modules imported, settings read). A full pass over
    the whole heap of a sidecar right after 30 s of 200 streams (pydantic, httptools,
    uvicorn, the settings) paused its loop, every stream in flight, for 21–28 ms; over
    what is left after the freeze, 1–3 ms (docs/benchmarks.md). Frozen objects are never
    examined for cycles again, which is what start-up objects of a long-lived process
    need. Nothing is collected first: a collection runs finalizers, and in a forked child a
    finalizer inherited from the parent can wait forever on a thread that did not survive
    the fork. Method: the CPython documentation of ``gc.freeze`` and Instagram's
    "Dismissing Python Garbage Collection at Instagram" (2017).

    Returns:
        The number of objects frozen so far (:func:`gc.get_freeze_count`).
    """
    gc.freeze()
    return gc.get_freeze_count()
