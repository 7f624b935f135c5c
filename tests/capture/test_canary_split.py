"""Unit tests of the canary split: the stable bucket, the pin table, the session router's
decisions, the split file (render, write, read, errors) and the canary bootstrap."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from shadoweval.capture.canary_split import (
    ARM_HEADER,
    BASELINE_CLUSTER,
    CANDIDATE_CLUSTER,
    SPLIT_FILE,
    WEIGHT_TOTAL,
    Split,
    arm_of_cluster,
    read_split,
    render_split_routes,
    write_split,
)
from shadoweval.capture.envoy_config import (
    EXT_PROC_FILTER,
    ROUTER_CLUSTER,
    ROUTER_FILTER,
    CanarySpec,
    EnvoyConfigSpec,
    render_envoy_config,
)
from shadoweval.capture.session_router import PinTable, SessionRouter, session_key, stable_bucket
from shadoweval.config import CaptureSettings, EnvoyCanarySettings, EnvoySettings, Settings
from shadoweval.errors import ConfigError


def _spec(split_dir: Path, **kw: Any) -> EnvoyConfigSpec:
    return EnvoyConfigSpec(
        upstream_url="http://baseline.internal:8000",
        canary=CanarySpec(candidate_url="https://candidate.internal", split_dir=split_dir),
        **kw,
    )


# -- stable bucket ---------------------------------------------------------------------------


def test_stable_bucket_is_xxhash64_as_envoy_computes_it() -> None:
    # the same value in every process (not Python's salted hash()), pinned to XXH64's
    # published vectors (seed 0): "abc" → 0x44BC2CF5AD770999, "" → 0xEF46DB3751D8E999
    assert stable_bucket("abc") == 0x44BC2CF5AD770999 % WEIGHT_TOTAL == 2249
    assert stable_bucket("") == 0xEF46DB3751D8E999 % WEIGHT_TOTAL
    assert stable_bucket(b"abc") == stable_bucket("abc")
    buckets = [stable_bucket(f"session-{i}") for i in range(20_000)]
    assert all(0 <= b < WEIGHT_TOTAL for b in buckets)
    # roughly uniform: each tenth of the range holds 10 % +- 1.5 %
    for tenth in range(10):
        share = sum(tenth * 1000 <= b < (tenth + 1) * 1000 for b in buckets) / len(buckets)
        assert 0.085 < share < 0.115, (tenth, share)


def test_session_key_is_the_first_present_session_header() -> None:
    names = ("x-session-id", "x-tenant-id")
    assert session_key([(b"x-tenant-id", b"t"), (b"X-Session-Id", b"s")], names) == b"s"
    assert session_key([(b"x-tenant-id", b"t")], names) == b"t"
    assert session_key([(b"other", b"o")], names) is None


# -- pin table -------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pin_table_forgets_the_least_recently_seen() -> None:
    pins = PinTable(max_entries=2, idle_s=100.0, clock=Clock())
    pins.set(b"a", "baseline")
    pins.set(b"b", "candidate")
    assert pins.get(b"a") == "baseline"  # a is now the most recently seen
    pins.set(b"c", "candidate")
    assert len(pins) == 2
    assert pins.get(b"b") is None
    assert pins.get(b"a") == "baseline"
    assert pins.get(b"c") == "candidate"


def test_pin_table_forgets_idle_sessions() -> None:
    clock = Clock()
    pins = PinTable(max_entries=10, idle_s=5.0, clock=clock)
    pins.set(b"a", "candidate")
    pins.set(b"b", "baseline")
    clock.now = 4.0
    assert pins.get(b"a") == "candidate"  # seen again: its idle time restarts
    clock.now = 8.0
    assert pins.get(b"b") is None
    assert pins.get(b"a") == "candidate"
    clock.now = 20.0
    pins.set(b"c", "baseline")  # expires idle entries from the old end
    assert len(pins) == 1


@pytest.mark.parametrize(("entries", "idle"), [(0, 1.0), (1, 0.0)])
def test_pin_table_refuses_bad_bounds(entries: int, idle: float) -> None:
    with pytest.raises(ConfigError) as err:
        PinTable(entries, idle)
    assert err.value.field.startswith("envoy.canary.")


# -- the router's decisions ------------------------------------------------------------------


def _router(tmp_path: Path, share: float) -> SessionRouter:
    write_split(tmp_path, _spec(tmp_path), Split(candidate_share=share, revision=1))
    router = SessionRouter(tmp_path, ("x-session-id",), CollectorRegistry(), rng=random.Random(7))
    router.split = read_split(tmp_path)
    return router


def _sample(router: SessionRouter, name: str, **labels: str) -> float:
    return router.registry.get_sample_value(name, labels) or 0.0


def _set(router: SessionRouter, share: float, revision: int) -> None:
    write_split(router.split_dir, _spec(router.split_dir), Split(share, revision))
    assert router.reload()


def test_raising_the_share_never_moves_a_pinned_session(tmp_path: Path) -> None:
    router = _router(tmp_path, 0.1)
    keys = [f"k{i}".encode() for i in range(300)]
    first = {k: router.decide(k) for k in keys}
    assert {reason for _arm, reason in first.values()} == {"new"}
    for k, (arm, _) in first.items():
        assert (arm == "candidate") == (stable_bucket(k) < 1000)
    _set(router, 0.6, 2)
    for k, (arm, _) in first.items():
        assert router.decide(k) == (arm, "pinned")
    # a session first seen now lands by the same monotone rule at the new share
    late = [f"late{i}".encode() for i in range(300)]
    for k in late:
        arm, reason = router.decide(k)
        assert reason == "new"
        assert (arm == "candidate") == (stable_bucket(k) < 6000)


def test_rollback_overrides_pins_and_full_share_takes_every_new_session(tmp_path: Path) -> None:
    router = _router(tmp_path, 0.5)
    keys = [f"k{i}".encode() for i in range(100)]
    for k in keys:
        router.decide(k)
    _set(router, 0.0, 2)
    assert {router.decide(k) for k in keys} == {("baseline", "rolled_back")}
    assert router.decide(None) == ("baseline", "rolled_back")
    _set(router, 0.5, 3)  # after a rollback, sessions stay where the rollback put them
    assert {router.decide(k) for k in keys} == {("baseline", "pinned")}
    _set(router, 1.0, 4)  # full rollout: pinned conversations finish where they are
    assert {router.decide(k) for k in keys} == {("baseline", "pinned")}
    fresh = [f"new{i}".encode() for i in range(50)]
    assert {router.decide(k) for k in fresh} == {("candidate", "full")}
    assert router.decide(None) == ("candidate", "full")
    assert (
        _sample(router, "shadoweval_canary_decisions_total", arm="baseline", reason="rolled_back")
        == 101
    )


def test_requests_without_a_session_key_are_drawn_at_the_share(tmp_path: Path) -> None:
    router = _router(tmp_path, 0.3)
    arms = [router.decide(None) for _ in range(2000)]
    assert {reason for _, reason in arms} == {"no_session"}
    share = sum(arm == "candidate" for arm, _ in arms) / len(arms)
    assert 0.25 < share < 0.35
    assert len(router.pins) == 0


def test_a_bad_split_file_keeps_the_last_good_split(tmp_path: Path) -> None:
    router = _router(tmp_path, 0.3)
    (tmp_path / SPLIT_FILE).write_text("version_info: [not, a, revision]\n")
    assert not router.reload()
    assert router.split == Split(0.3, 1)
    assert _sample(router, "shadoweval_canary_split_reload_errors_total") == 1
    assert not router.reload()  # the same bad file is counted once
    assert _sample(router, "shadoweval_canary_split_reload_errors_total") == 1


# -- the split file --------------------------------------------------------------------------


def test_split_validates_share_and_revision() -> None:
    for share in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ConfigError) as err:
            Split(candidate_share=share, revision=0)
        assert err.value.field == "candidate_share"
    with pytest.raises(ConfigError) as err:
        Split(candidate_share=0.5, revision=-1)
    assert err.value.field == "revision"
    assert Split(0.123456, 0).candidate_weight == 1235


def test_arm_of_cluster() -> None:
    assert arm_of_cluster(BASELINE_CLUSTER) == "baseline"
    assert arm_of_cluster(CANDIDATE_CLUSTER) == "candidate"
    assert arm_of_cluster("shadow_eval_capture") is None
    assert arm_of_cluster(None) is None


def test_render_split_routes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, session_headers=("X-Session-Id", "x-tenant-id"))
    doc = yaml.safe_load(render_split_routes(spec, Split(0.25, 7)))
    assert doc["version_info"] == "7"
    (config,) = doc["resources"]
    assert config["name"] == "live"
    routes = config["virtual_hosts"][0]["routes"]
    # marker route, 8 captured paths (4 routes × trailing slash), catch-all: 3 routes each
    assert len(routes) == (1 + 2 * len(spec.routes) + 1) * 3
    assert len(spec.routes) == 4  # chat, completions, Responses, Messages
    for i in range(0, len(routes), 3):
        cand, base, weighted = routes[i : i + 3]
        assert cand["match"]["headers"][-1] == {
            "name": ARM_HEADER,
            "string_match": {"exact": "candidate"},
        }
        assert cand["route"]["cluster"] == CANDIDATE_CLUSTER
        assert cand["route"]["host_rewrite_literal"] == "candidate.internal"
        assert base["route"]["cluster"] == BASELINE_CLUSTER
        assert base["route"]["host_rewrite_literal"] == "baseline.internal:8000"
        action = weighted["route"]
        assert action["weighted_clusters"] == {
            "clusters": [  # candidate first: its band is [0, 2500), the router's rule
                {
                    "name": CANDIDATE_CLUSTER,
                    "weight": 2500,
                    "host_rewrite_literal": "candidate.internal",
                },
                {
                    "name": BASELINE_CLUSTER,
                    "weight": 7500,
                    "host_rewrite_literal": "baseline.internal:8000",
                },
            ],
            "use_hash_policy": True,
        }
        assert action["hash_policy"] == [
            {"header": {"header_name": "x-session-id"}, "terminal": True},
            {"header": {"header_name": "x-tenant-id"}, "terminal": True},
        ]
        assert weighted["metadata"]["filter_metadata"]["shadow_eval"] == {
            "candidate_share": 0.25,
            "revision": 7,
        }
        for route in (cand, base, weighted):
            assert route["request_headers_to_remove"] == [ARM_HEADER]
            assert route["route"]["timeout"] == "0s"
    captured = [r for r in routes if EXT_PROC_FILTER not in r.get("typed_per_filter_config", {})]
    assert {r["match"]["path"] for r in captured} == {
        path for route in spec.routes for path in (route, route + "/")
    }
    assert all(r["match"]["headers"][0]["name"] == ":method" for r in captured)


def test_render_split_routes_needs_the_canary(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        render_split_routes(EnvoyConfigSpec(upstream_url="http://a:1"), Split(0.0, 0))
    assert err.value.field == "envoy.canary"
    spec = EnvoyConfigSpec(
        upstream_url="http://a:1",
        canary=CanarySpec(candidate_url="http://b:2/v1", split_dir=tmp_path),
    )
    with pytest.raises(ConfigError) as err:
        render_split_routes(spec, Split(0.0, 0))
    assert err.value.field == "envoy.canary.candidate_url"


def test_write_split_is_atomic_and_keeps_history(tmp_path: Path) -> None:
    split_dir = tmp_path / "new" / "split"
    spec = _spec(split_dir)
    path = write_split(split_dir, spec, Split(0.1, 1))
    assert path == split_dir / SPLIT_FILE
    write_split(split_dir, spec, Split(0.0, 2))
    assert read_split(split_dir) == Split(0.0, 2)
    names = sorted(p.name for p in split_dir.iterdir())
    assert names == ["split.1.yaml", "split.2.yaml", "split.yaml"]  # no temporary left
    assert (split_dir / "split.2.yaml").read_text() == path.read_text()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("a: [", "split.yaml"),
        ("- 1\n", "split.yaml"),
        ("version_info: x\nresources: []\n", "version_info"),
        ("version_info: '1'\nresources: []\n", "resources"),
        ("version_info: '1'\nresources: [{name: other}]\n", "resources[0]"),
        ("version_info: '1'\nresources: [{name: live, virtual_hosts: []}]\n", "filter_metadata"),
    ],
)
def test_read_split_names_the_file_and_the_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / SPLIT_FILE).write_text(text)
    with pytest.raises(ConfigError) as err:
        read_split(tmp_path)
    assert str(tmp_path / SPLIT_FILE) in str(err.value)
    assert err.value.field.startswith(field)


def test_read_split_refuses_a_share_out_of_range_and_a_missing_file(tmp_path: Path) -> None:
    write_split(tmp_path, _spec(tmp_path), Split(0.5, 3))
    path = tmp_path / SPLIT_FILE
    path.write_text(path.read_text().replace("candidate_share: 0.5", "candidate_share: 1.5"))
    with pytest.raises(ConfigError) as err:
        read_split(tmp_path)
    assert err.value.field == "filter_metadata.shadow_eval.candidate_share"
    with pytest.raises(ConfigError) as err:
        read_split(tmp_path / "absent")
    assert err.value.field == "envoy.canary.split_dir"


# -- the bootstrap ---------------------------------------------------------------------------


def test_canary_bootstrap(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ext_proc_port=9465)
    spec = EnvoyConfigSpec(
        upstream_url=spec.upstream_url,
        canary=CanarySpec(
            candidate_url="https://candidate.internal",
            split_dir=tmp_path,
            router_port=9470,
            router_timeout_ms=35,
        ),
    )
    boot = yaml.safe_load(render_envoy_config(spec))
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert "route_config" not in hcm
    source = hcm["rds"]["config_source"]["path_config_source"]
    assert source == {
        "path": str(tmp_path.absolute() / SPLIT_FILE),
        "watched_directory": {"path": str(tmp_path.absolute())},
    }
    assert hcm["early_header_mutation_extensions"][0]["typed_config"]["mutations"] == [
        {"remove": ARM_HEADER}
    ]
    names = [f["name"] for f in hcm["http_filters"]]
    assert names == [
        ROUTER_FILTER,
        "envoy.filters.http.buffer",
        EXT_PROC_FILTER,
        "envoy.filters.http.router",
    ]
    router = hcm["http_filters"][0]["typed_config"]
    assert "observability_mode" not in router
    assert router["failure_mode_allow"] is True
    assert router["message_timeout"] == "0.035s"
    assert router["processing_mode"]["request_header_mode"] == "SEND"
    assert router["processing_mode"]["response_header_mode"] == "SKIP"
    capture = hcm["http_filters"][2]["typed_config"]
    assert "xds.cluster_name" in capture["response_attributes"]
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    assert set(clusters) == {
        BASELINE_CLUSTER,
        CANDIDATE_CLUSTER,
        "shadow_eval_capture",
        ROUTER_CLUSTER,
    }
    cand = clusters[CANDIDATE_CLUSTER]
    assert cand["transport_socket"]["typed_config"]["sni"] == "candidate.internal"
    assert cand["circuit_breakers"] == clusters[BASELINE_CLUSTER]["circuit_breakers"]
    router_ep = clusters[ROUTER_CLUSTER]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    assert router_ep["endpoint"]["address"]["socket_address"]["port_value"] == 9470
    with pytest.raises(ConfigError) as err:
        render_envoy_config(
            EnvoyConfigSpec(
                upstream_url="http://a:1",
                canary=CanarySpec(candidate_url="http://b:2", split_dir=tmp_path, router_port=0),
            )
        )
    assert err.value.field == "envoy.canary.router_port"


def test_canary_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL", "http://cand:9000")
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR", str(tmp_path))
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__ROUTER_TIMEOUT_MS", "50")
    settings = Settings()
    canary = settings.envoy.canary
    assert canary is not None
    assert canary.candidate_url == "http://cand:9000"
    assert canary.split_dir == tmp_path
    assert canary.router_timeout_ms == 50
    assert canary.router_port == 9466
    spec = EnvoyConfigSpec.from_settings(settings.capture, settings.envoy)
    assert spec.canary is not None
    assert spec.canary.split_dir == tmp_path
    assert spec.session_headers == settings.capture.session_headers
    with pytest.raises(ValueError, match="candidate_url"):
        EnvoyCanarySettings(candidate_url="ftp://x", split_dir=tmp_path)
    assert EnvoySettings().canary is None
    assert CaptureSettings().session_headers == ("x-session-id", "x-tenant-id")
