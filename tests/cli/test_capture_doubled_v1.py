"""``capture serve`` names a doubled ``/v1`` in its upstream URL (a new user's mistake: the
base URL given as ``http://host:port/v1`` while the clients' paths carry their own ``/v1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shadoweval.cli.capture_cmd import doubled_v1_warning

ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")


def test_an_upstream_ending_in_v1_is_named_with_the_origin_to_give() -> None:
    warning = doubled_v1_warning("http://127.0.0.1:8000/v1/", ROUTES)
    assert warning is not None
    assert "/v1/chat/completions is forwarded as http://127.0.0.1:8000/v1/v1/chat/completions" in (
        warning
    )
    assert warning.endswith("--upstream http://127.0.0.1:8000")


def test_an_origin_or_another_base_path_gets_no_warning() -> None:
    assert doubled_v1_warning("http://127.0.0.1:8000", ROUTES) is None
    assert doubled_v1_warning("https://gateway.example/openai", ROUTES) is None
    assert doubled_v1_warning("http://127.0.0.1:8000/v1", ("/chat/completions",)) is None


def test_capture_serve_prints_the_warning_at_start(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "shadow-eval"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
    with subprocess.Popen(
        [str(exe), "capture", "serve", "--upstream", "http://127.0.0.1:9/v1", "--port", "0",
         "--admin-port", "0", "--sink", "file", "--capture-dir", str(tmp_path / "cap")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the condition: the warning line, printed before serving
            seen.append(line)
            if "warning:" in line:
                break
        proc.terminate()
        proc.stderr.read()
        proc.wait(timeout=60)
    assert any("/v1 twice" in line and "--upstream http://127.0.0.1:9" in line for line in seen), (
        "".join(seen)
    )
