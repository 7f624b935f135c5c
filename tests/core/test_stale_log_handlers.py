"""A log handler left writing to a closed stream does not outlive its test (tests/conftest.py).

In the full suite a command run in-process through ``CliRunner`` (``api serve``'s uvicorn
``log_config``) left the root logger writing to the runner's closed stderr; every later log
line printed "--- Logging error ---" and its call stack into another test's captured stderr,
and ``tests/cli/test_judge_preflight.py`` failed on what its stderr must not contain (the
stack's source lines hold the test's wrong key and the word "preflight"). The two tests
below run in order: the first leaves such a handler, the second finds none.
"""

from __future__ import annotations

import io
import logging

from tests.conftest import _closed_stream_handlers


def test_a_command_leaves_a_handler_on_its_closed_stderr() -> None:
    stream = io.StringIO()
    logging.getLogger().addHandler(logging.StreamHandler(stream))
    stream.close()
    assert _closed_stream_handlers()


def test_the_next_test_finds_no_handler_on_a_closed_stream() -> None:
    assert _closed_stream_handlers() == []
