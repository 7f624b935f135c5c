"""Envoy as a child process: :class:`EnvoyProcess` (start, ready, stats, drain, stop).

Started as ``envoy -c CONFIG --disable-hot-restart --admin-address-path FILE`` (hot restart
needs a shared-memory segment per base id, so two Envoys on one machine would collide;
this launcher never hot-restarts). Ready means Envoy's admin ``GET /ready`` answers
``LIVE`` (all static listeners and clusters initialised); the bound live port is read
from ``GET /listeners?format=json`` (so ``port: 0`` works), the admin address from the
file Envoy writes. Counters come from ``GET /stats?format=json``.

Stopping (:meth:`EnvoyProcess.stop`): ``POST /drain_listeners`` (the listeners close at
once: no new connection is accepted; requests in flight go on — not ``?inboundonly``, which
drains only listeners marked ``traffic_direction: INBOUND`` and so drained nothing here),
wait until ``http.live.downstream_rq_active`` is 0 or ``grace_s`` passed (0: not at all; a
second stop signal, :meth:`EnvoyProcess.cut_grace`, ends the wait), then SIGTERM (Envoy
closes what is left), SIGKILL after ``kill_after_s``. Envoy's stderr goes to ``log_path``
when given (else it is inherited).

Envoy runs in its own session (``start_new_session``), so a terminal's SIGINT or a signal
sent to this process's group reaches the launcher only, which then drains and stops
Envoy. Envoy dies with the launcher (:mod:`shadoweval.process_death`: Linux's parent-death
signal): a launcher killed with SIGKILL (or by the OOM killer) takes Envoy with it, so the
live port is free for the restart.

Source: Envoy's operations docs: command line options, the administration interface
(``/ready``, ``/listeners``, ``/stats``, ``/drain_listeners``) (envoyproxy.io, v1.40).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

import httpx

from shadoweval.capture.envoy_config import LIVE_STAT_PREFIX
from shadoweval.errors import ShadowEvalError
from shadoweval.lifecycle import AsyncLifecycle
from shadoweval.process_death import die_with_parent_argv

logger = logging.getLogger(__name__)


class EnvoyError(ShadowEvalError):
    """Envoy could not be started, or exited (the message has the end of its log)."""


class EnvoyProcess(AsyncLifecycle):
    """One Envoy child process running ``config_yaml``.

    Args:
        binary: the Envoy executable (:func:`shadoweval.capture.envoy_config.find_envoy_binary`).
        config_yaml: the bootstrap (:func:`shadoweval.capture.envoy_config.render_envoy_config`).
        work_dir: where the config, the admin-address file (and the log) are written.
        concurrency: worker threads (``--concurrency``); ``None``: one per core.
        log_path: Envoy's log file (``--log-path``); ``None``: inherit stderr.
        log_level: ``--log-level``; the ext_proc component logs at ``error`` only (it
            logs a warning per request while the capture service is down; the
            ``ext_proc.streams_failed`` counter counts them instead).
        ready_timeout_s: how long :meth:`start` waits for ``LIVE``, seconds.

    Attributes:
        admin_url: ``http://127.0.0.1:PORT`` of Envoy's admin once started.
        listen_port: the live listener's bound port once started.
    """

    def __init__(
        self,
        binary: Path,
        config_yaml: str,
        work_dir: Path,
        *,
        concurrency: int | None = None,
        log_path: Path | None = None,
        log_level: str = "warning",
        ready_timeout_s: float = 30.0,
    ) -> None:
        self.binary = binary
        self.config_yaml = config_yaml
        self.work_dir = work_dir
        self.concurrency = concurrency
        self.log_path = log_path
        self.log_level = log_level
        self.ready_timeout_s = ready_timeout_s
        self.admin_url = ""
        self.listen_port: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._client: httpx.AsyncClient | None = None
        self._cut = False
        self._drained = False

    @property
    def returncode(self) -> int | None:
        """Envoy's exit status once it exited, else ``None``."""
        return None if self._proc is None else self._proc.returncode

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return None if self._proc is None else self._proc.pid

    async def start(self) -> None:
        """Spawn Envoy and wait until it is ``LIVE``.

        Raises:
            EnvoyError: Envoy exited, or was not ``LIVE`` within ``ready_timeout_s`` (it is
                killed then).
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            try:
                await self._start()
            except BaseException:
                await self._kill()
                raise

    async def _start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "envoy.yaml"
        config.write_text(self.config_yaml, encoding="utf-8")
        address_file = self.work_dir / "envoy-admin-address"
        address_file.unlink(missing_ok=True)
        args = [
            str(self.binary),
            "-c",
            str(config),
            "--disable-hot-restart",
            "--admin-address-path",
            str(address_file),
            "--log-level",
            self.log_level,
            "--component-log-level",
            "ext_proc:error",
        ]
        if self.concurrency is not None:
            args += ["--concurrency", str(self.concurrency)]
        if self.log_path is not None:
            args += ["--log-path", str(self.log_path)]
        self._client = httpx.AsyncClient(timeout=5.0, trust_env=False)
        # its own session: a terminal's Ctrl-C (or a signal to our process group) reaches
        # this process only, which drains Envoy gracefully instead of Envoy quitting at once.
        # It dies with us (SIGKILL included): the parent-death signal fires when the forking
        # *thread* exits, and this forks on the event loop's thread, which lives as long as
        # the launcher (start() must not run on a short-lived thread).
        self._proc = await asyncio.create_subprocess_exec(
            *die_with_parent_argv(args), stdin=asyncio.subprocess.DEVNULL, start_new_session=True
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_s
        while True:
            if self._proc.returncode is not None:
                raise EnvoyError(
                    f"envoy exited with status {self._proc.returncode} while starting"
                    f"{self._log_tail()}"
                )
            if not self.admin_url and address_file.exists():
                address = address_file.read_text().strip()
                if address:
                    self.admin_url = f"http://{address}"
            if self.admin_url and await self._live():
                break
            if loop.time() > deadline:
                raise EnvoyError(
                    f"envoy was not LIVE within {self.ready_timeout_s} s{self._log_tail()}"
                )
            await asyncio.sleep(0.05)
        self.listen_port = await self._listener_port()
        logger.info("envoy pid %d LIVE; admin %s", self._proc.pid, self.admin_url)

    def _log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return ":\n" + "\n".join(tail) if tail else ""

    async def _live(self) -> bool:
        assert self._client is not None
        try:
            resp = await self._client.get(self.admin_url + "/ready")
        except httpx.HTTPError:
            return False
        return resp.status_code == 200 and resp.text.strip() == "LIVE"

    async def ready(self) -> bool:
        """Whether Envoy runs and its admin says ``LIVE``."""
        return self._proc is not None and self._proc.returncode is None and await self._live()

    async def _listener_port(self) -> int | None:
        assert self._client is not None
        resp = await self._client.get(self.admin_url + "/listeners", params={"format": "json"})
        for status in resp.json().get("listener_statuses", []):
            if status.get("name") == "live":
                return int(status["local_address"]["socket_address"]["port_value"])
        return None

    async def stats(self, prefix: str = "") -> dict[str, int]:
        """Envoy's counters and gauges whose name starts with ``prefix``.

        Raises:
            EnvoyError: the admin did not answer.
        """
        if self._client is None or not self.admin_url:
            raise EnvoyError("envoy is not running")
        try:
            resp = await self._client.get(self.admin_url + "/stats", params={"format": "json"})
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise EnvoyError(f"envoy admin /stats failed: {exc}") from exc
        out: dict[str, int] = {}
        for stat in resp.json().get("stats", []):
            name, value = stat.get("name", ""), stat.get("value")
            if name.startswith(prefix) and isinstance(value, int):
                out[name] = value
        return out

    async def wait(self) -> int:
        """Wait for Envoy to exit; its exit status."""
        assert self._proc is not None
        return await self._proc.wait()

    async def drain(self, grace_s: float) -> bool:
        """Stop accepting and wait (at most ``grace_s``; 0 = not at all) until no request
        is in flight.

        Envoy keeps running (its processor streams still deliver); never raises.

        Returns:
            ``True`` when no request was in flight at the end, ``False`` when the grace
            period ran out, was 0 or was cut with requests still running (or Envoy could
            not be asked).
        """
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return True
        return await self._drain(grace_s)

    async def stop(self, grace_s: float = 0.0, kill_after_s: float = 10.0) -> None:
        """:meth:`drain` within ``grace_s``, then SIGTERM (SIGKILL after ``kill_after_s``).

        Idempotent; never raises for an Envoy that already exited.
        """
        if not self._stopping():
            return
        proc = self._proc
        try:
            await self.drain(grace_s)
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), kill_after_s)
                except TimeoutError:
                    logger.warning("envoy did not exit %.0f s after SIGTERM; killing", kill_after_s)
                    await self._kill()
        finally:
            if self._client is not None:
                await self._client.aclose()
                self._client = None

    def cut_grace(self) -> None:
        """Stop waiting for requests in flight: a drain in progress ends now."""
        self._cut = True

    @property
    def grace_cut(self) -> bool:
        """Whether :meth:`cut_grace` was called (a second stop signal)."""
        return self._cut

    async def _drain(self, grace_s: float) -> bool:
        if self._client is None:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        active = f"http.{LIVE_STAT_PREFIX}.downstream_rq_active"
        try:
            if not self._drained:
                await self._client.post(self.admin_url + "/drain_listeners")
                self._drained = True
            while True:
                stats = await self.stats(active)
                if stats.get(active, 0) == 0:
                    return True
                if self._cut or loop.time() >= deadline:
                    break
                await asyncio.sleep(0.1)
            if grace_s > 0 and not self._cut:
                logger.warning("requests still in flight after the %.1f s grace period", grace_s)
        except (httpx.HTTPError, EnvoyError) as exc:
            logger.warning("could not drain envoy: %s", exc)
        return False

    async def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
