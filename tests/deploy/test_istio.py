"""deploy/istio/ as data: the Istio ``EnvoyFilter`` and the Envoy Gateway
``EnvoyExtensionPolicy`` carry the ext_proc settings ``capture envoy-config --fragment``
renders, so the three cannot drift apart.

The EnvoyFilter embeds the fragment's filter and cluster verbatim (rendered for the
capture Service's DNS name); the EnvoyExtensionPolicy has no observability mode or
deferred close, so what it has is compared field by field: body modes, failOpen ↔
failure_mode_allow, messageTimeout ↔ message_timeout, the attributes, the gRPC port. The
policy's filter is also run in the real Envoy (tests/capture/test_envoy_fragment.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.capture.envoy_fragment import ROUTER_FILTER_NAME, fragment_parts
from shadoweval.ports import EXT_PROC_PORT

ISTIO = Path(__file__).resolve().parents[2] / "deploy" / "istio"
CAPTURE_HOST = "shadow-eval-capture.shadow-eval.svc.cluster.local"
HCM = "envoy.filters.network.http_connection_manager"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ISTIO / name).read_text(encoding="utf-8")) if d]


def _fragment() -> tuple[dict[str, Any], dict[str, Any]]:
    return fragment_parts(
        EnvoyConfigSpec(upstream_url="http://vllm:8000", ext_proc_host=CAPTURE_HOST)
    )


def _ms(duration: str) -> float:
    """``"200ms"`` (Gateway API) or ``"0.200s"`` (protobuf) → milliseconds."""
    if duration.endswith("ms"):
        return float(duration[:-2])
    return float(duration.removesuffix("s")) * 1000


def test_envoy_filter_embeds_the_fragment_before_the_router() -> None:
    (doc,) = _docs("envoyfilter.yaml")
    assert doc["apiVersion"] == "networking.istio.io/v1alpha3"
    assert doc["kind"] == "EnvoyFilter"
    assert doc["spec"]["workloadSelector"]["labels"]
    by_target = {p["applyTo"]: p for p in doc["spec"]["configPatches"]}
    assert set(by_target) == {"HTTP_FILTER", "CLUSTER"}
    http_filter, cluster = _fragment()

    filter_patch = by_target["HTTP_FILTER"]
    assert filter_patch["match"]["context"] in ("SIDECAR_INBOUND", "GATEWAY")
    match = filter_patch["match"]["listener"]["filterChain"]["filter"]
    assert match == {"name": HCM, "subFilter": {"name": ROUTER_FILTER_NAME}}
    assert filter_patch["patch"]["operation"] == "INSERT_BEFORE"
    assert filter_patch["patch"]["value"] == http_filter, (
        "deploy/istio/envoyfilter.yaml's filter differs from `capture envoy-config "
        f"--fragment --ext-proc-host {CAPTURE_HOST}`: update it"
    )
    config = filter_patch["patch"]["value"]["typed_config"]
    assert config["observability_mode"] is True
    assert config["failure_mode_allow"] is True

    cluster_patch = by_target["CLUSTER"]
    assert cluster_patch["patch"]["operation"] == "ADD"
    assert cluster_patch["patch"]["value"] == cluster
    port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert port["address"]["socket_address"]["port_value"] == EXT_PROC_PORT
    assert config["grpc_service"]["envoy_grpc"]["cluster_name"] == cluster["name"]


def test_extension_policy_has_the_fragments_ext_proc_settings() -> None:
    policy, grant = _docs("envoyextensionpolicy.yaml")
    assert policy["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert policy["kind"] == "EnvoyExtensionPolicy"
    (target,) = policy["spec"]["targetRefs"]
    assert (target["group"], target["kind"]) == ("gateway.networking.k8s.io", "HTTPRoute")
    (ext,) = policy["spec"]["extProc"]
    http_filter, _cluster = _fragment()
    config = http_filter["typed_config"]
    mode = config["processing_mode"]

    assert ext["failOpen"] is config["failure_mode_allow"] is True
    assert _ms(ext["messageTimeout"]) == _ms(config["message_timeout"])
    gateway_body = {"Streamed": "STREAMED", "Buffered": "BUFFERED"}
    assert gateway_body[ext["processingMode"]["request"]["body"]] == mode["request_body_mode"]
    assert gateway_body[ext["processingMode"]["response"]["body"]] == mode["response_body_mode"]
    assert ext["processingMode"]["request"]["attributes"] == config["request_attributes"]
    assert ext["processingMode"]["response"]["attributes"] == config["response_attributes"]
    assert "stage" not in ext  # Route (the default): the client's request and response

    (backend,) = ext["backendRefs"]
    assert backend["port"] == EXT_PROC_PORT
    assert f"{backend['name']}.{backend['namespace']}.svc.cluster.local" == CAPTURE_HOST

    # the cross-namespace reference is granted, in the Service's namespace
    assert grant["kind"] == "ReferenceGrant"
    assert grant["metadata"]["namespace"] == backend["namespace"]
    assert grant["spec"]["from"] == [
        {
            "group": "gateway.envoyproxy.io",
            "kind": "EnvoyExtensionPolicy",
            "namespace": policy["metadata"]["namespace"],
        }
    ]
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": backend["name"]}]
