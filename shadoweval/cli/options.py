"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DatabaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the results database "
        "(default: SHADOWEVAL_DATABASE__URL, else sqlite:///shadow-eval.db).",
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="Gate policy YAML (default: the shipped default policy)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the verdict as JSON on stdout.")]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
]
EncoderOpt = Annotated[
    str,
    typer.Option(
        "--encoder",
        help="Similarity encoder: minilm (bundled all-MiniLM-L6-v2) or hashing (not "
        "semantic; smoke tests only).",
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="Torch device for the encoder.")]
StructuredOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--structured-task-type",
        help="Task type whose outputs must be JSON even when requests do not say so (repeatable).",
    ),
]


def database_url(option: str | None) -> str:
    """The database URL: the option, else the settings (environment), else the default."""
    if option:
        return option
    from shadoweval.config import Settings

    return Settings().database.url
