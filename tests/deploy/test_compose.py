"""docker-compose.yml and the Dockerfile, checked against the code they would run.

No Docker engine runs here, so the files are read as data: the compose file parses, every
shadow-eval command and flag it runs exists in the CLI, every SHADOWEVAL_* variable is a
valid setting, every image is pinned, healthchecks probe the ports the commands listen on,
and the Dockerfile ships every package the wheel declares.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.manifests import (
    REPO,
    check_settings_environment,
    command_line,
    exact_image,
    interpolate,
)
from tests.packaging.light import LIGHT_COMMANDS

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
ENV = {"API_TOKEN": "t" * 40, "SESSION_SALT": "s" * 40}
"""What an operator must set (the required variables); everything else has a default."""


def _resolve(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_resolve(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _resolve(value, env) for key, value in node.items()}
    return node


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    resolved = _resolve(loaded, ENV)
    assert isinstance(resolved, dict)
    return resolved


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def _ours(compose: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, service in _services(compose).items():
        if str(service.get("image", "")).startswith(("shadow-eval:", "shadow-eval-capture:")):
            yield name, service


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    assert isinstance(command, list), "commands are lists (no shell word splitting)"
    return [str(part) for part in command]


def _project() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_topology_is_complete(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert {
        "kafka", "postgres", "migrate", "live-model", "candidate-model", "front", "sidecar",
        "replay", "compare", "api", "dashboard",
    } <= set(services)  # fmt: skip
    assert _command(services["front"])[:2] == ["capture", "envoy"]
    assert _command(services["sidecar"])[:2] == ["capture", "serve"]
    assert services["sidecar"]["profiles"] == ["sidecar"]
    assert services["replay"]["deploy"]["replicas"] == 2
    assert services["compare"]["deploy"]["replicas"] == 2
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft


def test_every_command_and_flag_exists_in_the_cli(compose: dict[str, Any]) -> None:
    ran = []
    for name, service in _ours(compose):
        params = command_line(_command(service))
        ran.append((name, params))
    assert len(ran) >= 9
    replay = dict(ran)["replay"]
    assert replay["source"].startswith("kafka://kafka:9092/")


def test_every_environment_variable_is_a_setting(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _name, service in _ours(compose):
        env = {key: str(value) for key, value in service.get("environment", {}).items()}
        with monkeypatch.context() as patch:
            check_settings_environment(env, patch)
    assert interpolate("${POSTGRES_PASSWORD:-shadoweval}", {}) == "shadoweval"


@pytest.mark.parametrize("missing", ["API_TOKEN", "SESSION_SALT"])
def test_a_missing_secret_stops_compose(missing: str) -> None:
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    with pytest.raises(KeyError, match=missing):
        _resolve(raw, {k: v for k, v in ENV.items() if k != missing})


def test_the_front_ends_hash_sessions_with_the_operators_salt(compose: dict[str, Any]) -> None:
    for name in ("front", "sidecar"):
        env = _services(compose)[name]["environment"]
        assert env["SHADOWEVAL_CAPTURE__SESSION_SALT"] == ENV["SESSION_SALT"], name


def test_every_volume_mount_point_exists_in_the_image_for_its_user(
    compose: dict[str, Any],
) -> None:
    """A mount point missing from the image is created by Docker owned by root, and the
    non-root user cannot write a cache or a spool there."""
    steps = [step.split() for op, rest in _dockerfile() if op == "RUN" for step in rest.split("&&")]
    made = {p for words in steps if words[:2] == ["mkdir", "-p"] for p in words[2:]}
    owned = {p for words in steps if words[:3] == ["chown", "-R", "shadoweval"] for p in words[3:]}
    for name, service in _ours(compose):
        for mount in service.get("volumes", []):
            target = str(mount).split(":")[1]
            assert target in made, f"{name}: {target} is not created in the image"
            assert any(target == o or target.startswith(o + "/") for o in owned), (name, target)


IMAGE_TARGETS = {"shadow-eval": "full", "shadow-eval-capture": "capture"}
"""Our images and the Dockerfile target each is built from."""
CAPTURE_IMAGE_SERVICES = {
    "migrate", "live-model", "candidate-model", "front", "sidecar", "replay", "canary-model",
    "canary-front",
}  # fmt: skip
"""The live path (front ends, replay workers, example model servers, the migration): the
capture image, the light install without the evaluator's weight."""


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    version = _project()["project"]["version"]
    for name, service in _services(compose).items():
        image = str(service["image"])
        repository = image.partition(":")[0]
        if repository in IMAGE_TARGETS:
            assert image == f"{repository}:{version}", name
            assert service["build"]["dockerfile"] == "Dockerfile"
            assert service["build"]["target"] == IMAGE_TARGETS[repository], name
        else:
            assert exact_image(image), f"{name}: image {image!r} is not pinned to a release"


def test_the_live_path_runs_the_capture_image(compose: dict[str, Any]) -> None:
    """The capture image runs the light commands only (tests/packaging/light.py: they run
    in the base install); everything else runs the full image."""
    light = {c[0] for c in LIGHT_COMMANDS} | {"db"}
    for name, service in _ours(compose):
        capture = str(service["image"]).startswith("shadow-eval-capture:")
        assert capture == (name in CAPTURE_IMAGE_SERVICES), name
        if capture:
            assert _command(service)[0] in light, name
    assert _dockerfile_targets() == {"capture", "full"} | {"runtime", "source"}


def _listening_ports(service: dict[str, Any]) -> set[int]:
    command = _command(service) if "command" in service else []
    ports = set()
    for flag in ("--port", "--admin-port", "--metrics-port"):
        if flag in command:
            ports.add(int(command[command.index(flag) + 1]))
    return ports


def test_healthchecks_probe_what_the_service_serves(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name, service in services.items():
        if name == "migrate":
            assert service["restart"] == "no"
            continue
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        probe = " ".join(check["test"])
        urls = re.findall(r"http://127\.0\.0\.1:(\d+)/", probe)
        if urls:
            assert int(urls[0]) in _listening_ports(service), (name, probe)
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)


def test_upstreams_and_volumes_are_wired(compose: dict[str, Any]) -> None:
    services = _services(compose)
    front = _command(services["front"])
    upstream = urlsplit(front[front.index("--upstream") + 1])
    assert upstream.hostname in services
    assert upstream.port in _listening_ports(services[str(upstream.hostname)])
    replay = _command(services["replay"])
    candidate = urlsplit(replay[replay.index("--candidate-url") + 1])
    assert candidate.hostname == "candidate-model"
    declared = set(compose["volumes"])
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = str(mount).split(":", 1)[0]
            assert source in declared, (name, mount)
    # The example tables answer the same prompts, so every captured request can be replayed.
    live = (REPO / "deploy/compose/live.jsonl").read_text(encoding="utf-8").splitlines()
    cand = (REPO / "deploy/compose/candidate.jsonl").read_text(encoding="utf-8").splitlines()
    prompt = re.compile(r'"prompt": "([^"]*)"')
    assert [prompt.findall(x) for x in live] == [prompt.findall(x) for x in cand]


def test_stop_grace_covers_the_capture_grace_period(compose: dict[str, Any]) -> None:
    for name in ("front", "sidecar"):
        service = _services(compose)[name]
        command = _command(service)
        grace_s = float(command[command.index("--grace-period") + 1])
        stop_s = float(str(service["stop_grace_period"]).removesuffix("s"))
        assert stop_s >= grace_s + 15, name  # + capture.flush_deadline_s


def _dockerfile() -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            lines.append((instruction.upper(), rest.strip()))
    return lines


def _stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage of the Dockerfile (``FROM … AS name``) and its instructions, with those
    of the stages it is built ``FROM`` first."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for op, rest in _dockerfile():
        if op == "FROM":
            image, _, name = rest.partition(" AS ")
            current = [*stages.get(image.strip(), []), (op, image.strip())]
            stages[name.strip() or image.strip()] = current
        else:
            current.append((op, rest))
    return stages


def _dockerfile_targets() -> set[str]:
    return {name for name in _stages() if ":" not in name}


def _copied(stage: str) -> set[str]:
    """The repository paths ``stage`` copies, ``COPY --from=<stage>`` included."""
    stages = _stages()
    copied: set[str] = set()
    for op, rest in stages[stage]:
        if op != "COPY":
            continue
        words = rest.split()
        if words[0].startswith("--from="):
            copied |= _copied(words[0].removeprefix("--from="))
        else:
            copied |= set(words[:-1])
    return copied


@pytest.mark.parametrize("target", ["capture", "full"])
def test_the_dockerfile_ships_every_package_and_runs_the_cli(target: str) -> None:
    lines = _stages()[target]
    stages = _stages()
    for base in (rest.split(" AS ")[0].strip() for op, rest in _dockerfile() if op == "FROM"):
        assert base in stages or exact_image(base), f"FROM {base}: not pinned to a release"
    copied = _copied(target)
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
    packages = _project()["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in packages:
        assert pattern.rstrip("*") in copied, f"the image would miss package {pattern}"
    linked = [p for p in (REPO / "shadoweval").iterdir() if p.is_symlink()]
    assert linked, "shadoweval/ links no stage folder"
    for link in linked:
        target_dir = link.resolve().relative_to(REPO).as_posix()
        assert target_dir in copied, f"the image would miss {target_dir} (linked as {link.name})"
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    assert not copied & ignored
    assert ("WORKDIR", "/app") in lines
    installs = [rest for op, rest in lines if op == "RUN" and "pip install" in rest]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    torch_spec = re.search(r"TORCH_SPEC \?= (\S+)", makefile)
    assert torch_spec is not None
    if target == "full":
        assert any(torch_spec[1] in rest for rest in installs)
        assert installs[-1] == 'pip install ".[all]"'
    else:  # the light install: the base dependencies only, no torch
        assert installs == ["pip install ."]
    user = [rest for op, rest in lines if op == "USER"][-1]
    assert user.isdigit()
    assert int(user) != 0
    entry = [rest for op, rest in lines if op == "ENTRYPOINT"][-1]
    assert entry == '["shadow-eval"]'
    assert "shadow-eval" in _project()["project"]["scripts"]


def test_the_compose_tables_are_small_and_own(compose: dict[str, Any]) -> None:
    for name in ("live-model", "candidate-model", "canary-model"):
        command = _command(_services(compose)[name])
        table = Path(command[command.index("--input") + 1].replace("/app/", f"{REPO}/", 1))
        assert table.stat().st_size < 10_000


CANARY_SERVICES = ("canary-model", "canary-front", "canary-controller")
SPLIT_ENV = "SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR"


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Mount target → volume name of a service."""
    return {str(m).split(":")[1]: str(m).split(":")[0] for m in service.get("volumes", [])}


def test_the_canary_profile_wires_split_capture_log_and_candidate(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--profile canary`: a second model version, the Envoy front with the canary split,
    and the controller; the front, the controller and the API render the split file from
    the same settings and share its directory; the controller reads the front's capture
    log; nothing outside the profile needs a canary service."""
    from shadoweval.config import load_settings

    services = _services(compose)
    for name in CANARY_SERVICES:
        assert services[name]["profiles"] == ["canary"], name
    for name, service in services.items():
        if name not in CANARY_SERVICES:
            assert "canary" not in service.get("profiles", []), name
            assert not set(service.get("depends_on", {})) & set(CANARY_SERVICES), name

    model = _command(services["canary-model"])
    assert model[0] == "mock-llm"
    assert (
        model[model.index("--model") + 1]
        != _command(services["live-model"])[_command(services["live-model"]).index("--model") + 1]
    )

    front = services["canary-front"]
    front_cmd = _command(front)
    assert front_cmd[:2] == ["capture", "envoy"]
    sinks = [front_cmd[i + 1] for i, part in enumerate(front_cmd) if part == "--sink"]
    assert sinks == ["file"]  # canary traffic is not mirrored to the shadow topic
    capture_dir = front_cmd[front_cmd.index("--capture-dir") + 1]
    assert front["environment"]["SHADOWEVAL_CAPTURE__SESSION_SALT"] == ENV["SESSION_SALT"]

    controller = services["canary-controller"]
    params = command_line([*_command(controller)[:2], "some-canary-id", *_command(controller)[3:]])
    assert _command(controller)[:2] == ["canary", "run"]
    assert float(params["interval_s"]) == 60
    assert str(params["capture_log"]) == capture_dir

    # the same spec everywhere the split is written: front, controller, API
    writers = ("canary-front", "canary-controller", "api")
    specs = set()
    for name in writers:
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        with monkeypatch.context() as patch:
            for key in list(env):
                if key.startswith("SHADOWEVAL_"):
                    patch.setenv(key, env[key])
            settings = load_settings()
        assert settings.envoy.canary is not None, name
        specs.add(
            (
                settings.capture.upstream_url,
                settings.envoy.canary.candidate_url,
                str(settings.envoy.canary.split_dir),
                tuple(settings.capture.routes),
                tuple(settings.capture.session_headers),
            )
        )
        split_dir = env[SPLIT_ENV]
        assert _mounts(services[name])[split_dir] == "canary-split", name
    assert len(specs) == 1, specs
    (upstream, candidate_url, _, _, _) = specs.pop()
    assert upstream == front_cmd[front_cmd.index("--upstream") + 1]
    candidate = urlsplit(candidate_url)
    assert candidate.hostname == "canary-model"
    assert candidate.port in _listening_ports(services["canary-model"])

    # the controller reads the capture log the front writes, from the same volume
    assert _mounts(front)[capture_dir] == "canary-capture-log"
    assert _mounts(controller)[capture_dir] == "canary-capture-log"
    assert any(str(m).endswith(":ro") for m in controller["volumes"] if capture_dir in str(m))
    assert controller["environment"]["CANARY_ID"] == ""  # compose variable, default unset
    assert set(controller["depends_on"]) == {"migrate", "canary-front"}
