"""deploy/argo/, deploy/flagger/ and deploy/github-actions/ against the real API.

Each example is loaded from its file and run the way its controller runs it, against the
API served by uvicorn over a SQLite store whose runs' latest verdicts are PROMOTE, HOLD and
ROLLBACK (:mod:`tests.verdict_runs`), with the bearer token:

* Argo Rollouts: the AnalysisTemplate's web provider request (its ``{{ args.* }}``
  resolved from the Rollout's step and the template's defaults), then its ``jsonPath`` and
  ``successCondition``/``failureCondition`` on the real JSON. No Argo evaluator is
  installed here, so :func:`json_path` and :func:`condition` implement exactly the forms
  the template uses (``{$.a.b}``; ``result == "x"``) and fail loudly on any other.
* Flagger: each hook's ``cmd`` run with ``bash -c``, as Flagger's load tester runs a
  ``type: bash`` hook (200 only when it exits 0).
* GitHub Actions: the verdict step's ``run:`` script under bash, its exit status checked.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from jsonpath_ng.ext.parser import parse as jsonpath_parse
from pydantic import SecretStr

from shadoweval.api.app import build_app
from shadoweval.records import Decision
from shadoweval.serving import BackgroundServer
from shadoweval.storage import Database, Repository
from tests.deploy.manifests import REPO
from tests.verdict_runs import DECISION_RUNS, seed_decision_runs

TOKEN = "rollout-controllers-token-" + "t" * 20
ARGO = REPO / "deploy" / "argo"
FLAGGER = REPO / "deploy" / "flagger"
WORKFLOW = REPO / "deploy" / "github-actions" / "shadow-eval-verdict.yml"

_EQUALS = re.compile(r"""^result == (?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')$""")
_ARG = re.compile(r"\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}")


def json_path(template: str, body: Any) -> Any:
    """Argo's ``jsonPath`` (Kubernetes JSONPath: one expression in braces), read by
    jsonpath-ng; it must select exactly one value, as Argo's web provider requires.

    Raises:
        AssertionError: not one braced expression, or not exactly one match.
    """
    assert template.startswith("{"), f"jsonPath {template!r}"
    assert template.endswith("}"), f"jsonPath {template!r}"
    matches = jsonpath_parse(template[1:-1]).find(body)
    assert len(matches) == 1, f"jsonPath {template!r} selects {len(matches)} values"
    return matches[0].value


def condition(expression: str, result: Any) -> bool:
    """An Argo condition (the expr language over ``result``), for ``result == "x"`` only.

    Raises:
        AssertionError: any other form.
    """
    match = _EQUALS.match(expression.strip())
    assert match, f'condition {expression!r}: this test evaluates only result == "x"'
    wanted = match["dq"] if match["dq"] is not None else match["sq"]
    return bool(result == wanted)


def _yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API under uvicorn over the three decided runs; its base URL."""
    url = f"sqlite:///{tmp_path_factory.mktemp('rollout-controllers') / 'api.db'}"
    with Database(url) as db:
        db.upgrade()
        repo = Repository(db)
        seed_decision_runs(repo)
        with BackgroundServer(build_app(repo, SecretStr(TOKEN))) as server:
            yield server.url


# --- Argo Rollouts ---------------------------------------------------------------------


def _argo() -> tuple[dict[str, Any], dict[str, Any]]:
    (template,) = _yaml(ARGO / "analysis-template.yaml")
    (rollout,) = _yaml(ARGO / "rollout.yaml")
    assert (template["kind"], rollout["kind"]) == ("AnalysisTemplate", "Rollout")
    return template, rollout


def _analysis_step(rollout: dict[str, Any], template_name: str) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        s["analysis"] for s in rollout["spec"]["strategy"]["canary"]["steps"] if "analysis" in s
    ]
    (step,) = steps
    assert [t["templateName"] for t in step["templates"]] == [template_name]
    return step


def _argo_args(
    template: dict[str, Any], step: dict[str, Any], api_url: str, run_id: str
) -> dict[str, str]:
    """The AnalysisRun's args: the Rollout's values over the template's defaults, the token
    from its Secret; ``api-url`` and the run id pointed at this test's API and run."""
    args: dict[str, str] = {}
    for arg in template["spec"]["args"]:
        if "valueFrom" in arg:
            ref = arg["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("shadow-eval-api-token", "token")
            args[arg["name"]] = TOKEN
        elif "value" in arg:
            args[arg["name"]] = arg["value"]
    args.update({a["name"]: a["value"] for a in step.get("args", [])})
    missing = {a["name"] for a in template["spec"]["args"]} - set(args)
    assert not missing, f"args without a value: {missing}"
    assert args["run-id"] == "candidate-2025-06-01"
    return {**args, "api-url": api_url, "run-id": run_id}


def _resolve(text: str, args: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        assert match[1] in args, f"{{{{ args.{match[1]} }}}} is not an arg of the template"
        return args[match[1]]

    return _ARG.sub(one, text)


def _measure(metric: dict[str, Any], args: dict[str, str]) -> str:
    """One measurement as Argo takes it: Successful, Failed, Inconclusive or Error."""
    web = metric["provider"]["web"]
    assert web.get("method", "GET") == "GET"
    response = httpx.request(
        "GET",
        _resolve(web["url"], args),
        headers={h["key"]: _resolve(h["value"], args) for h in web["headers"]},
        timeout=web["timeoutSeconds"],
    )
    if not response.is_success:
        return "Error"
    result = json_path(web["jsonPath"], response.json())
    if condition(metric["failureCondition"], result):  # Argo checks failure first
        return "Failed"
    if condition(metric["successCondition"], result):
        return "Successful"
    return "Inconclusive"


@pytest.mark.parametrize(
    ("decision", "measured"),
    [
        (Decision.PROMOTE, "Successful"),
        (Decision.HOLD, "Inconclusive"),
        (Decision.ROLLBACK, "Failed"),
    ],
)
def test_argo_analysis_template_reads_each_decision(
    api_url: str, decision: Decision, measured: str
) -> None:
    template, rollout = _argo()
    step = _analysis_step(rollout, template["metadata"]["name"])
    (metric,) = template["spec"]["metrics"]
    args = _argo_args(template, step, api_url, DECISION_RUNS[decision])
    assert _measure(metric, args) == measured


def test_argo_limits_make_hold_pause_and_rollback_abort() -> None:
    template, _ = _argo()
    (metric,) = template["spec"]["metrics"]
    # HOLD on every measurement must end Inconclusive (pause), never Successful at count.
    assert metric["inconclusiveLimit"] == metric["count"] - 1
    assert metric["failureLimit"] == 0  # the first ROLLBACK fails the run
    assert metric["interval"] == "5m"


def test_argo_without_the_token_is_an_error_not_a_decision(api_url: str) -> None:
    template, rollout = _argo()
    (metric,) = template["spec"]["metrics"]
    step = _analysis_step(rollout, template["metadata"]["name"])
    args = _argo_args(template, step, api_url, DECISION_RUNS[Decision.PROMOTE])
    assert _measure(metric, {**args, "api-token": "w" * 40}) == "Error"
    assert _measure(metric, {**args, "run-id": "no-such-run"}) == "Error"


# --- Flagger ---------------------------------------------------------------------------

IN_CLUSTER_API = "http://shadow-eval-api.shadow-eval.svc.cluster.local:8787"
TOKEN_FILE = "/etc/shadow-eval/token"
EXAMPLE_RUN = "candidate-2025-06-01"


def _hooks() -> dict[str, dict[str, Any]]:
    (canary,) = _yaml(FLAGGER / "canary.yaml")
    assert canary["kind"] == "Canary"
    hooks = {hook["type"]: hook for hook in canary["spec"]["analysis"]["webhooks"]}
    assert set(hooks) == {"confirm-promotion", "rollback"}
    for hook in hooks.values():
        assert hook["url"].startswith("http://flagger-loadtester.")
        assert hook["metadata"]["type"] == "bash"
    return hooks


def _local(cmd: str, api_url: str, run_id: str, token_file: Path) -> str:
    """The hook's command pointed at this test's API, run and token file."""
    for placeholder in (IN_CLUSTER_API, TOKEN_FILE, f"/runs/{EXAMPLE_RUN}/"):
        assert cmd.count(placeholder) == 1, f"{placeholder!r} not once in {cmd!r}"
    return (
        cmd.replace(IN_CLUSTER_API, api_url)
        .replace(TOKEN_FILE, str(token_file))
        .replace(f"/runs/{EXAMPLE_RUN}/", f"/runs/{run_id}/")
    )


@pytest.mark.parametrize("decision", list(Decision))
def test_flagger_hooks_pass_only_on_their_decision(
    api_url: str, tmp_path: Path, decision: Decision
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN, encoding="utf-8")
    passes = {"confirm-promotion": Decision.PROMOTE, "rollback": Decision.ROLLBACK}
    for hook_type, hook in _hooks().items():
        cmd = _local(hook["metadata"]["cmd"], api_url, DECISION_RUNS[decision], token_file)
        ran = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
        assert (ran.returncode == 0) is (passes[hook_type] is decision), (hook_type, ran)
        assert TOKEN not in ran.stdout + ran.stderr


def test_flagger_hook_without_the_token_file_never_passes(api_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("", encoding="utf-8")
    for hook in _hooks().values():
        run_id = DECISION_RUNS[
            Decision.PROMOTE if hook["type"] != "rollback" else Decision.ROLLBACK
        ]
        cmd = _local(hook["metadata"]["cmd"], api_url, run_id, empty)
        assert subprocess.run(["bash", "-c", cmd], capture_output=True, check=False).returncode != 0


def test_flagger_loadtester_patch_mounts_the_token_the_hooks_read() -> None:
    (patch,) = _yaml(FLAGGER / "loadtester-token.yaml")
    pod = patch["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "shadow-eval-api-token"
    (container,) = pod["containers"]
    assert container["name"] == "loadtester"  # the chart's container name
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"]
    assert f"{mount['mountPath']}/token" == TOKEN_FILE


# --- GitHub Actions --------------------------------------------------------------------


def _verdict_step() -> dict[str, Any]:
    (workflow,) = _yaml(WORKFLOW)
    steps: list[dict[str, Any]] = [
        s for job in workflow["jobs"].values() for s in job["steps"] if s.get("id") == "verdict"
    ]
    (step,) = steps
    assert "${{" not in step["run"], "the script must read inputs from env only"
    return step


def _run_step(api_url: str, run_id: str, tmp_path: Path) -> tuple[int, str, str]:
    step = _verdict_step()
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        **{k: str(v) for k, v in step["env"].items()},
        "API": api_url,
        "TOKEN": TOKEN,
        "RUN": run_id,
        "WAIT_S": "0",  # one poll: a HOLD is final at once
        "GITHUB_OUTPUT": str(output),
    }
    ran = subprocess.run(
        ["bash", "-c", step["run"]], env=env, capture_output=True, text=True, check=False
    )
    return ran.returncode, output.read_text(encoding="utf-8"), ran.stdout + ran.stderr


@pytest.mark.parametrize(
    ("decision", "code"), [(Decision.PROMOTE, 0), (Decision.HOLD, 1), (Decision.ROLLBACK, 2)]
)
def test_github_actions_step_exits_with_the_decision_code(
    api_url: str, tmp_path: Path, decision: Decision, code: int
) -> None:
    returncode, output, logged = _run_step(api_url, DECISION_RUNS[decision], tmp_path)
    assert returncode == code, logged
    assert output == f"code={code}\n"
    assert f"look 2: {decision.value}" in logged
    assert TOKEN not in logged


def test_github_actions_step_exits_3_when_the_api_cannot_answer(
    api_url: str, tmp_path: Path
) -> None:
    returncode, output, logged = _run_step(api_url, "no-such-run", tmp_path)
    assert (returncode, output) == (3, "code=3\n"), logged
