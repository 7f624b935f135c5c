"""Every listener's default port is distinct (issue 30 item 6), read from where each
listener takes it: the settings' field defaults and the commands' option defaults.

Starting every listener at once would need Envoy, Kafka and a dashboard: the cheap ones
(the sidecar's live port, the HTTP API, a replay worker's metrics server) are started on
their defaults together, beside a plain socket bound on each other default; a default
already in use on this machine (another program's) is left out and named in the skip.
"""

from __future__ import annotations

import contextlib
import inspect
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, SecretStr

from shadoweval import ports
from shadoweval.api.app import build_app
from shadoweval.api_settings import ApiSettings
from shadoweval.capture.envoy_spec import CanarySpec, EnvoyConfigSpec
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.proxy import CaptureProxy
from shadoweval.capture.sampling import StickySampler
from shadoweval.cli.compare_cmd import FollowMetricsPortOpt
from shadoweval.cli.dashboard_cmd import dashboard_command
from shadoweval.cli.mock_llm_cmd import mock_llm_command
from shadoweval.cli.replay_cmd import MetricsPortOpt
from shadoweval.config import CaptureSettings, EnvoyCanarySettings, EnvoySettings
from shadoweval.replay.metrics import MetricsServer, WorkerMetrics, metrics_app
from shadoweval.serving import BackgroundServer
from shadoweval.storage import Database, Repository
from tests.capture.upstreams import CaptureCollector, ProxyThread

TOKEN = "a-token-of-sixteen-or-more"


def _field(model: type[BaseModel], name: str) -> int:
    default = model.model_fields[name].default
    assert isinstance(default, int), (model, name)
    return default


def _option(command: Callable[..., Any], name: str) -> int:
    default = inspect.signature(command).parameters[name].default
    assert isinstance(default, int), (command, name)
    return default


def _help_port(option: Any) -> int:
    """The port an off-by-default listener's ``--metrics-port`` help names."""
    info = option.__metadata__[0]
    words = info.help.rstrip(").").split()
    return int(words[-1])


def listener_defaults() -> dict[str, int]:
    """Every listener's default port by listener, from the settings and the commands."""
    return {
        "live": _field(CaptureSettings, "port"),
        "capture_admin": _field(CaptureSettings, "admin_port"),
        "ext_proc": _field(EnvoySettings, "ext_proc_port"),
        "canary_router": _field(EnvoyCanarySettings, "router_port"),
        "replay_metrics": _option(MetricsServer.__init__, "port"),
        "compare_metrics": _help_port(FollowMetricsPortOpt),
        "envoy_admin": _field(EnvoySettings, "admin_port"),
        "api": _field(ApiSettings, "port"),
        "dashboard": _option(dashboard_command, "port"),
        "mock_llm": _option(mock_llm_command, "port"),
    }


def test_every_listener_has_its_own_default_port() -> None:
    defaults = listener_defaults()
    assert defaults == dict(ports.DEFAULT_PORTS)  # one place, every listener in it
    by_port: dict[int, list[str]] = {}
    for name, port in defaults.items():
        by_port.setdefault(port, []).append(name)
    assert {p: names for p, names in by_port.items() if len(names) > 1} == {}
    # the replay worker's help names the port its metrics server defaults to
    assert _help_port(MetricsPortOpt) == defaults["replay_metrics"]
    # the Envoy config spec's defaults are the settings'
    spec = EnvoyConfigSpec(upstream_url="http://127.0.0.1:8000")
    assert (spec.listen_port, spec.ext_proc_port, spec.admin_port) == (
        defaults["live"],
        defaults["ext_proc"],
        defaults["envoy_admin"],
    )
    canary = CanarySpec(candidate_url="http://127.0.0.1:1", split_dir=Path("."))
    assert canary.router_port == defaults["canary_router"]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _bound(port: int) -> Iterator[None]:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


@contextlib.contextmanager
def _sidecar(port: int) -> Iterator[None]:
    settings = CaptureSettings(upstream_url="http://127.0.0.1:9")
    sampler = StickySampler(100.0, settings.session_headers, "salt")
    proxy = CaptureProxy(settings, sampler, CaptureCollector(), CaptureMetrics())
    with ProxyThread(proxy) as thread:

        async def listen() -> int:
            return await proxy.listen("127.0.0.1", port)

        assert thread.call(listen) == port
        yield


def test_the_cheap_listeners_start_together_on_their_defaults(tmp_path: Path) -> None:
    defaults = listener_defaults()
    busy = sorted(name for name, port in defaults.items() if not _free(port))
    if len(busy) == len(defaults):
        pytest.skip(f"every default port is in use on this machine: {busy}")
    url = f"sqlite:///{tmp_path / 'api.db'}"
    with Database(url) as db:
        db.upgrade()
    with contextlib.ExitStack() as stack:
        started: dict[str, str] = {}
        for name, port in defaults.items():
            if name in busy:
                continue
            if name == "live":
                stack.enter_context(_sidecar(port))
            elif name == "api":
                db = stack.enter_context(Database(url))
                app = build_app(Repository(db), SecretStr(TOKEN))
                server = stack.enter_context(BackgroundServer(app, port=port))
                started[name] = f"{server.url}/healthz"
            elif name == "replay_metrics":
                metrics = metrics_app(WorkerMetrics(), lambda: True)
                server = stack.enter_context(MetricsServer(metrics, host="127.0.0.1"))
                started[name] = f"{server.url}/healthz"
            else:
                stack.enter_context(_bound(port))
        for name, health in started.items():
            assert httpx.get(health, timeout=30).status_code == 200, name
    if busy:
        pytest.skip(f"started all but {busy}: in use on this machine")
