"""Make room for the connections a pool may open: the process's open-file limit.

Each pooled connection is a file descriptor; a replay at concurrency 1,024 under the
common soft ``RLIMIT_NOFILE`` of 1,024 would fail with ``EMFILE`` mid-run. At start the
client asks for ``max_connections + headroom`` descriptors: the soft limit is raised (up to
the hard limit, which an unprivileged process may do, ``setrlimit(2)``) when it is lower,
and a limit still too low is a :class:`~shadoweval.errors.ConfigError` before any request.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

from shadoweval.errors import ConfigError

FD_HEADROOM = 64
"""Descriptors kept for everything but the pool's connections (logs, database, Kafka)."""

GetLimit = Callable[[int], tuple[int, int]]
SetLimit = Callable[[int, tuple[int, int]], None]


def ensure_fd_limit(
    max_connections: int,
    *,
    field: str = "replay.concurrency",
    headroom: int = FD_HEADROOM,
    getrlimit: GetLimit = resource.getrlimit,
    setrlimit: SetLimit = resource.setrlimit,
) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to fit ``max_connections + headroom`` descriptors.

    Args:
        max_connections: connections the pool may open (the replay concurrency).
        field: the setting named in the error (``replay.concurrency``).
        headroom: descriptors needed besides the connections.
        getrlimit, setrlimit: the ``resource`` functions (a seam for tests).

    Returns:
        The soft limit now in force (descriptors).

    Raises:
        ConfigError: the hard limit is below what is needed (names ``field``, the number
            needed and both limits).
    """
    needed = max_connections + headroom
    soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    if target > soft:
        try:
            setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    if soft < needed:
        raise ConfigError(
            f"{field}={max_connections} needs {needed} open files (connections + "
            f"{headroom} spare) but RLIMIT_NOFILE is soft {soft}, hard {hard}: lower "
            f"{field} or raise the hard limit (ulimit -Hn, LimitNOFILE=)",
            field=field,
            value=max_connections,
        )
    return soft
