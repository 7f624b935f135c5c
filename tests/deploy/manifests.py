"""Checks shared by the deployment tests: a command line against the real CLI, settings
variables against the real settings, image references, compose interpolation.

Nothing here runs a container: the files are read as data and every part they name is
looked up in the code that would run it (the Typer command tree, ``shadoweval.config``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
import typer.main

REPO = Path(__file__).resolve().parents[2]
IMAGE_WORKDIR = "/app/"
"""The Dockerfile's WORKDIR: paths under it are files of this repository."""

_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}")
_EXACT_TAG = re.compile(r"^v?\d+\.\d+\.\d+(\.\d+)?([-.][A-Za-z0-9.-]+)?$")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation: ``${X}``, ``${X:-default}``, ``${X-default}``,
    ``${X:?message}`` and ``$$`` (the compose specification, "Interpolation").

    Raises:
        KeyError: a ``${X:?message}`` variable is unset or empty (compose refuses to start).
    """

    def _one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        current = env.get(name)
        empty = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-"):
            return arg if empty else str(current)
        if op in (":?", "?"):
            if empty:
                raise KeyError(f"{name}: {arg}")
            return str(current)
        return "" if current is None else current

    return _INTERPOLATION.sub(_one, value).replace("$$", "$")


def command_line(argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``shadow-eval ARGV`` with the real command tree, without running it.

    Returns the leaf command's parsed parameters (name → value). Paths under the image's
    ``/app/`` are mapped into this repository, so a file the command is given must exist.

    Raises:
        AssertionError: no such command, an unknown flag, a bad value or a missing file;
            the message names the command line and what the CLI said.
    """
    from shadoweval.cli import app

    group: Any = typer.main.get_command(app)
    args = [_repo_path(a) for a in argv]
    path: list[str] = []
    while hasattr(group, "commands") and args and not args[0].startswith("-"):
        name = args.pop(0)
        if name not in group.commands:
            raise AssertionError(
                f"shadow-eval {' '.join(argv)}: no command {' '.join([*path, name])!r} "
                f"(known: {sorted(group.commands)})"
            )
        group = group.commands[name]
        path.append(name)
    if hasattr(group, "commands"):
        raise AssertionError(f"shadow-eval {' '.join(argv)}: {' '.join(path)!r} needs a subcommand")
    try:
        ctx = group.make_context(" ".join(path), list(args))
    except typer.TyperException as exc:
        raise AssertionError(f"shadow-eval {' '.join(argv)}: {exc}") from None
    return dict(ctx.params)


def _repo_path(arg: str) -> str:
    if not arg.startswith(IMAGE_WORKDIR):
        return arg
    local = REPO / arg.removeprefix(IMAGE_WORKDIR)
    if not local.exists():
        raise AssertionError(f"{arg}: the image would hold {local}, which does not exist")
    return str(local)


def check_settings_environment(env: Mapping[str, str], monkeypatch: Any) -> None:
    """Load every ``SHADOWEVAL_*`` variable of ``env`` through the real settings classes.

    Raises:
        ConfigError: a variable names no setting or has an invalid value (from
            ``shadoweval.config.load_settings``).
    """
    from shadoweval.api_settings import ApiSettings
    from shadoweval.config import load_settings

    for key, value in env.items():
        if key.startswith("SHADOWEVAL_"):
            monkeypatch.setenv(key, value)
    load_settings()
    api_keys = {
        k.removeprefix("SHADOWEVAL_API__").lower() for k in env if k.startswith("SHADOWEVAL_API__")
    }
    unknown = api_keys - set(ApiSettings.model_fields)
    assert not unknown, f"SHADOWEVAL_API__* names no API setting: {sorted(unknown)}"
    ApiSettings()


def exact_image(image: str) -> bool:
    """Whether an image reference is pinned: a digest, or a tag that names one release
    (``MAJOR.MINOR.PATCH``; PostgreSQL's own ``MAJOR.MINOR``), never ``latest`` or a bare major."""
    if "@sha256:" in image:
        return True
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return False
    base = tag.split("-", 1)[0]
    if name.endswith("postgres") and re.fullmatch(r"\d+\.\d+", base):
        return True
    return bool(_EXACT_TAG.match(tag))
