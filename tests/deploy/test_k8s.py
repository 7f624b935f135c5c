"""deploy/k8s/: valid against the Kubernetes schemas, and wired to the code it runs.

The manifests are validated offline with ``kubernetes-validate`` (the Kubernetes OpenAPI
schemas, strict: an unknown field fails) for one pinned Kubernetes release. The shutdown
timings of the live-model pod are recomputed with :func:`shadoweval.drain.drain_budget` from
the LLMPerf leaderboard's own p99 figures for one real endpoint (``../shared/data``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shadoweval.drain import drain_budget
from tests.deploy.manifests import REPO, check_settings_environment, command_line, exact_image
from tests.packaging.light import LIGHT_COMMANDS

K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33.0"
CUSTOM_KINDS = {"ScaledObject"}
"""Kinds of operators' CRDs (KEDA) that the core schemas do not cover: checked by hand."""
MAX_TOKENS = 2048
"""The largest max_tokens the example service allows (deploy/k8s/README.md)."""
PLACEHOLDER_SECRETS = {
    "SHADOWEVAL_DATABASE__URL": "postgresql+psycopg://u:p@db.example:5432/shadoweval",
    "SHADOWEVAL_API__TOKEN": "t" * 40,
    "SHADOWEVAL_CAPTURE__SESSION_SALT": "s" * 40,
}


def _documents() -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in sorted([*K8S.glob("*.yaml"), *K8S.glob("keda/*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                docs.append((path, doc))
    return docs


def _kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in _documents() if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in _kind(kind) if doc["metadata"]["name"] == name]
    return found


def _containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {port.get("name", ""): port["containerPort"] for port in container.get("ports", [])}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_every_manifest_is_valid_for_kubernetes() -> None:
    checked = 0
    for path, doc in _documents():
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        checked += 1
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "shadoweval", path.name
    assert checked >= 14


def test_an_unknown_field_is_refused() -> None:
    deployment = _named("Deployment", "replay")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["probes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_images_are_pinned() -> None:
    for deployment in _kind("Deployment"):
        for container in _containers(deployment):
            assert exact_image(container["image"]), container["image"]


def test_shadow_eval_containers_run_real_commands_and_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (config,) = _kind("ConfigMap")
    ran = 0
    for deployment in _kind("Deployment"):
        for container in _containers(deployment):
            if not container["image"].startswith(("shadow-eval:", "shadow-eval-capture:")):
                continue
            command_line(container["args"])
            env = {}
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] == config["metadata"]["name"]
                env.update(config["data"])
            for var in container.get("env", []):
                secret = var["valueFrom"]["secretKeyRef"]
                assert secret["name"] == "shadoweval-secrets"
                env[var["name"]] = PLACEHOLDER_SECRETS[secret["key"]]
            with monkeypatch.context() as patch:
                check_settings_environment(env, patch)
            ran += 1
    assert ran >= 6


def test_the_live_path_runs_the_capture_image() -> None:
    """The sidecar beside vLLM and the replay workers run the capture image (the light
    install: tests/packaging/light.py); compare, the API and the dashboard the full one."""
    light = {c[0] for c in LIGHT_COMMANDS}
    images = {}
    for deployment in _kind("Deployment"):
        for container in _containers(deployment):
            image = str(container["image"])
            if image.startswith("shadow-eval-capture:"):
                assert container["args"][0] in light, container["name"]
            images[(deployment["metadata"]["name"], container["name"])] = image.partition(":")[0]
    assert images[("live-model", "capture")] == "shadow-eval-capture"
    assert images[("replay", "replay")] == "shadow-eval-capture"
    for name in ("compare", "api", "dashboard"):
        assert images[(name, name)] == "shadow-eval", name


def test_the_sidecar_sits_beside_vllm_with_probes_on_its_admin_port() -> None:
    pod = _named("Deployment", "live-model")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    vllm, capture = containers["vllm"], containers["capture"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    # vLLM on the loopback only (no client can bypass the capture), so its probes must run
    # inside the container: an httpGet probe goes to the pod IP and would never pass.
    assert _flag(vllm["args"], "--host") == "127.0.0.1"
    for probe in ("startupProbe", "livenessProbe"):
        assert "httpGet" not in vllm[probe], probe
        assert "http://127.0.0.1:8000/health" in " ".join(vllm[probe]["exec"]["command"])
    salt = {e["name"]: e for e in capture["env"]}["SHADOWEVAL_CAPTURE__SESSION_SALT"]
    assert salt["valueFrom"]["secretKeyRef"]["name"] == "shadoweval-secrets"
    args = capture["args"]
    assert _flag(args, "--upstream") == f"http://127.0.0.1:{_ports(vllm)['vllm']}"
    ports = _ports(capture)
    assert ports["admin"] == int(_flag(args, "--admin-port"))
    assert ports["live"] == int(_flag(args, "--port"))
    assert capture["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert capture["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    service = _named("Service", "live-model")
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"live", "admin"}
    pdb = _named("PodDisruptionBudget", "live-model")
    assert pdb["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_termination_grace_comes_from_ttft_and_tpot_p99(shared_data: Path) -> None:
    summary = json.loads(
        (shared_data / "llmperf_leaderboard/summary/anyscale_70b.json").read_text()
    )
    budget = drain_budget(
        ttft_p99_ms=summary["results_ttft_s_quantiles_p99"] * 1000,
        tpot_p99_ms=summary["results_inter_token_latency_s_quantiles_p99"] * 1000,
        max_tokens=MAX_TOKENS,
        flush_deadline_s=float(
            _kind("ConfigMap")[0]["data"]["SHADOWEVAL_CAPTURE__FLUSH_DEADLINE_S"]
        ),
    )
    pod = _named("Deployment", "live-model")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert pod["terminationGracePeriodSeconds"] == budget.termination_grace_period_s
    capture = containers["capture"]
    assert float(_flag(capture["args"], "--grace-period")) == budget.sidecar_grace_period_s
    assert capture["lifecycle"]["preStop"]["sleep"]["seconds"] == budget.sidecar_pre_stop_s
    vllm_stop = containers["vllm"]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert vllm_stop == budget.model_pre_stop_s
    readme = (K8S / "README.md").read_text(encoding="utf-8")
    for number in (budget.termination_grace_period_s, budget.model_pre_stop_s):
        assert f"{number}" in readme
    assert "TTFT p99 + max_tokens × TPOT p99" in readme


def test_replay_workers_scale_on_their_consumer_groups_lag() -> None:
    replay = _named("Deployment", "replay")
    args = replay["spec"]["template"]["spec"]["containers"][0]["args"]
    group = f"shadoweval-replay.{_flag(args, '--run-id')}"  # shadoweval/application/replaying.py
    topic = _flag(args, "--source").rsplit("/", 1)[1]
    partitions = int(_kind("ConfigMap")[0]["data"]["SHADOWEVAL_KAFKA__PARTITIONS"])
    hpa = _named("HorizontalPodAutoscaler", "replay")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    labels = metric["external"]["metric"]["selector"]["matchLabels"]
    assert metric["external"]["metric"]["name"] == "kafka_consumergroup_lag"
    assert labels == {"consumergroup": group, "topic": topic}
    assert hpa["spec"]["maxReplicas"] <= partitions
    (keda,) = _kind("ScaledObject")
    assert keda["apiVersion"] == "keda.sh/v1alpha1"
    assert keda["spec"]["scaleTargetRef"]["name"] == "replay"
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["consumerGroup"] == group
    assert trigger["metadata"]["topic"] == topic
    assert keda["spec"]["maxReplicaCount"] <= partitions


def test_every_disruption_budget_selects_a_deployment() -> None:
    selectors = [d["spec"]["selector"]["matchLabels"] for d in _kind("Deployment")]
    budgets = _kind("PodDisruptionBudget")
    assert len(budgets) >= 4
    for pdb in budgets:
        assert pdb["spec"]["selector"]["matchLabels"] in selectors, pdb["metadata"]["name"]
