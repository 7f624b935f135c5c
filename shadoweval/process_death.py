"""Children that die with their parent: Linux's parent-death signal, set in the child.

Every process the product starts (Envoy, the canary's session router, the capture
workers, the capture builder's process pool, the compare workers) asks the kernel to send
it SIGKILL when its parent dies, however the parent died — SIGKILL and the OOM killer
included — so no Envoy is left holding the live port and no router process is left
behind. Each child still runs in its own session or process group where it did before,
so a terminal's Ctrl-C reaches only the launcher, which drains its children gracefully.

* An executed binary (Envoy): :func:`die_with_parent_argv` wraps its command line in a
  tiny Python shim that sets the signal and then ``exec``-s the binary (same pid; the
  signal survives ``exec``). Not ``preexec_fn``: that forces a real ``fork()`` of this
  multi-threaded process, and gRPC's fork handlers then abort the child now and then
  (measured: Envoy "exited with status -6 while starting").
* A ``multiprocessing`` child: :func:`die_with_parent` as the first line of its target
  (or pool initializer).

The race: the parent may die before the child sets the signal; the child then already
has a new parent (init or a subreaper) and no signal will ever come. So the shim compares
``os.getppid()`` with the pid the parent passed, and a ``multiprocessing`` child asks its
parent's sentinel, right after ``prctl``; a child whose parent is already gone kills itself.

The catch: the "parent" is the *thread* that forked the child, not the process: the
signal fires when that thread exits. Children must therefore be started from a thread that
lives as long as the parent process — the main thread or the event loop's thread (where
``asyncio.create_subprocess_exec``, ``multiprocessing.Process.start`` and
``ProcessPoolExecutor.submit`` fork), never a short-lived worker thread
(``asyncio.to_thread``, a thread pool).

Other platforms: a documented limitation. ``prctl`` is Linux-only; elsewhere nothing is
set (the session router and the workers still end when their pipe to the parent closes;
an Envoy outlives a SIGKILLed launcher there — send SIGTERM to the launcher).

Source: prctl(2), ``PR_SET_PDEATHSIG`` (Linux man-pages); execve(2) (the setting is kept
across ``exec`` but for set-user-ID binaries); Python ``multiprocessing``
(``parent_process``).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal the calling process gets when its parent thread dies."""

_prctl: Any = None
if sys.platform.startswith("linux"):
    _libc = ctypes.CDLL(None, use_errno=True)  # this program's symbols: libc's included
    _prctl = _libc.prctl

SUPPORTED = _prctl is not None
"""Whether this platform has a parent-death signal (Linux)."""


def die_with_parent(parent_pid: int | None = None) -> None:
    """In a child: be sent SIGKILL when the parent (the thread that forked us) dies.

    Args:
        parent_pid: the parent's pid as the parent saw it before the fork; the child
            kills itself with SIGKILL when its parent now is another process (the parent
            already died). ``None``: a ``multiprocessing``
            child, which asks its parent's sentinel (a pipe the parent holds: closed when
            the parent is gone) instead; outside ``multiprocessing``, no check.

    Does nothing on platforms without ``prctl`` (see the module docstring). Never raises
    (a refused ``prctl`` leaves the child as it was).
    """
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent_pid is not None:
        gone = os.getppid() != parent_pid
    else:
        parent = multiprocessing.parent_process()
        gone = parent is not None and not parent.is_alive()
    if gone:
        os.kill(os.getpid(), signal.SIGKILL)


_SHIM = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "if os.getppid() != int(sys.argv[1]): os.kill(os.getpid(), 9)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def die_with_parent_argv(argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` (``argv[0]``: an executable, looked up on
    ``PATH`` unless a path) so that it is killed with this process:
    ``python -I -S -c SHIM PARENT_PID ARGV...`` on Linux (the
    shim sets the parent-death signal, checks the parent, then ``exec``-s ``argv``: same
    pid, Envoy's own command line in ``ps``); ``argv`` unchanged elsewhere.

    Spawn it right away, on a thread that lives as long as this process (the module
    docstring). A missing executable makes the shim exit 1 with a Python traceback on
    stderr (not ``FileNotFoundError`` in the parent).
    """
    if _prctl is None:
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), *argv]
