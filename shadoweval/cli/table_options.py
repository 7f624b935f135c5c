"""The table options of ``shadow-eval import`` and ``shadow-eval mock-llm``, declared once.

:class:`TableOptions` declares every option of a recorded table (where it is, a preset or
the explicit column mapping) as a dataclass field whose metadata holds its flags, help
and help panel. :func:`with_table_options` turns those fields into the command's Typer
options and hands the command one parsed :class:`TableOptions`; :meth:`TableOptions.source`
checks the combination and builds the :class:`~shadoweval.application.importing.TableSource`.
Loading pandas and the import stage waits until a command runs (the CLI starts fast).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast, get_type_hints

import typer

from shadoweval.errors import TableMappingError

if TYPE_CHECKING:
    from shadoweval.application.importing import TableSource
    from shadoweval.tables import TableFormat, TableMapping

__all__ = ["TableOptions", "with_table_options"]

TABLE_PANEL = "Table"
MAPPING_PANEL = "Column mapping (instead of --preset)"
FORMATS = ("json", "jsonl", "csv", "tsv", "parquet")


def _option(*decls: str, help: str, panel: str = MAPPING_PANEL) -> dict[str, Any]:
    """A table option's field metadata: its flags (none: :func:`_flags`), help and help
    panel."""
    return {"decls": decls, "help": help, "panel": panel}


def _table_option(help: str) -> Any:
    """The field of an optional option of the table panel (where the table is, a preset);
    its flag is the field's name (:func:`_flags`)."""
    return field(default=None, metadata=_option(help=help, panel=TABLE_PANEL))


def _column_option(help: str, default: str | None = None) -> Any:
    """The field of an option of the explicit column mapping (``default``: when not given);
    its flag is the field's name (:func:`_flags`)."""
    return field(default=default, metadata=_option(help=help))


def _flags(option: Field[Any]) -> tuple[str, ...]:
    """The flags of a :class:`TableOptions` field: those its metadata names, else
    ``--field-name`` (``prompt_col``: ``--prompt-col``)."""
    return option.metadata["decls"] or ("--" + option.name.replace("_", "-"),)


@dataclass(frozen=True, slots=True)
class TableOptions:
    """Where a recorded table is and how its columns map, as given on the command line.

    Either ``preset`` or the explicit mapping (``output_col`` and ``prompt_col`` or
    ``messages_col``, plus optional label, timing, token, tool and request-field
    columns); each field is one option (its flag is ``--`` and its name, unless its
    metadata names its flags: :func:`_flags`).
    """

    input: Path = field(
        metadata=_option(
            "--input",
            "-i",
            help="Outputs table: a file (JSON array, JSON Lines, CSV, Parquet) or a "
            "directory of them.",
            panel=TABLE_PANEL,
        )
    )
    preset: str | None = _table_option(
        "Built-in mapping: alpaca_eval, mt_bench (first turns) or bfcl; or a "
        "trace format: otel_genai (OTLP/JSON spans), langfuse, litellm.",
    )
    prompts: Path | None = field(  # not _table_option: ruff (RUF009) takes Path as mutable
        default=None,
        metadata=_option(
            help="Prompts table joined to the outputs (mt_bench: question.jsonl; bfcl: data/).",
            panel=TABLE_PANEL,
        ),
    )
    format: str | None = _table_option("Force the file format: json, jsonl, csv, tsv, parquet.")
    prompt_col: str | None = _column_option("Column with the prompt text (one user message).")
    messages_col: str | None = _column_option("Column with an OpenAI message list.")
    system_col: str | None = _column_option("Column with a system prompt.")
    output_col: str | None = _column_option("Column with the model's answer.")
    output_format: str = _column_option(
        "Answer format: text, openai (tool_calls list) or bfcl ({name: args} list).",
        default="text",
    )
    task_type_col: str | None = _column_option("Column with the task type.")
    task_type: str | None = _column_option("Task type for every row (or for null cells).")
    model_col: str | None = _column_option("Column with the model name.")
    model: str | None = _column_option("Model name for every row (or for null cells).")
    id_col: str | None = _column_option("Column with a row id (default: a prompt hash).")
    captured_at_col: str | None = _column_option(
        "Column with the capture time: ISO 8601 with a UTC offset, or epoch seconds."
    )
    latency_col: str | None = _column_option("Column with end-to-end latency.")
    ttft_col: str | None = _column_option("Column with time to first token.")
    ttfc_col: str | None = _column_option(
        "Column with time to first visible content (reasoning excluded); "
        "without it TTFC is taken from TTFT.",
    )
    itl_col: str | None = _column_option("Column with mean inter-token latency.")
    latency_unit: str | None = _column_option(
        "Unit of the timing columns: s or ms (required with a timing column)."
    )
    prompt_tokens_col: str | None = _column_option("Column with prompt token counts.")
    completion_tokens_col: str | None = _column_option("Column with completion token counts.")
    tools_col: str | None = _column_option("Column with tool schemas.")
    request_fields_col: str | None = _column_option(
        "Column with a JSON object of further request fields (response_format, ...)."
    )
    tools_format: str = _column_option("Tool schema format: openai or bfcl.", default="openai")

    def mapping(self) -> TableMapping | None:
        """The explicit mapping, or ``None`` with ``--preset``.

        Raises:
            TableMappingError: a preset combined with column options, neither given, or an
                invalid mapping (the message names the option).
        """
        given = {name: getattr(self, name) for name in _COLUMN_OPTIONS}
        given = {k: v for k, v in given.items() if v is not None}
        if self.preset is not None:
            if given or self.output_format != "text" or self.tools_format != "openai":
                names = [_COLUMN_OPTIONS.get(k, k) for k in given] or [
                    "--output-format/--tools-format"
                ]
                raise TableMappingError(f"--preset cannot be combined with {', '.join(names)}")
            return None
        from pydantic import ValidationError

        from shadoweval.tables import TableMapping

        if self.output_col is None:
            raise TableMappingError(
                "give --preset, or an explicit mapping: "
                "--output-col and --prompt-col or --messages-col"
            )
        values: dict[str, Any] = {
            **given,
            "output_format": self.output_format,
            "tools_format": self.tools_format,
        }
        try:
            return TableMapping.model_validate(values)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                option = _COLUMN_OPTIONS.get(
                    loc, "--" + loc.replace("_", "-") if loc else "mapping"
                )
                problems.append(f"{option}: {err['msg']}")
            raise TableMappingError("invalid column mapping: " + "; ".join(problems)) from None

    def source(self) -> TableSource:
        """The table to load: its path, the preset or mapping, the prompts, the format.

        Raises:
            TableMappingError: an unknown ``--format``, or a bad mapping (:meth:`mapping`).
        """
        from shadoweval.application.importing import TableSource

        if self.format not in (None, *FORMATS):
            raise TableMappingError(
                f"--format {self.format!r}: use json, jsonl, csv, tsv or parquet"
            )
        return TableSource(
            self.input,
            mapping=self.mapping(),
            preset=self.preset,
            prompts=self.prompts,
            format=cast("TableFormat | None", self.format),
        )


_NOT_COLUMNS = frozenset({"input", "preset", "prompts", "format", "output_format", "tools_format"})
_COLUMN_OPTIONS: dict[str, str] = {
    f.name: _flags(f)[0] for f in fields(TableOptions) if f.name not in _NOT_COLUMNS
}
"""The mapping's column options (and the two constants): field name → flag."""


def _typer_parameters() -> list[inspect.Parameter]:
    """One keyword-only Typer option per :class:`TableOptions` field, in field order."""
    hints = get_type_hints(TableOptions)
    parameters = []
    for f in fields(TableOptions):
        meta = f.metadata
        option = typer.Option(*_flags(f), help=meta["help"], rich_help_panel=meta["panel"])
        parameters.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if f.default is MISSING else f.default,
                annotation=Annotated[hints[f.name], option],
            )
        )
    return parameters


def with_table_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the table options in place of its ``table: TableOptions`` parameter.

    The returned function's signature (what Typer reads) has ``command``'s other
    parameters with the table options where ``table`` was; when called, it collects the
    table options into one :class:`TableOptions` and calls ``command(table=..., ...)``.

    Raises:
        TypeError: ``command`` has no ``table`` parameter.
    """
    signature = inspect.signature(command, eval_str=True)
    if "table" not in signature.parameters:
        raise TypeError(f"{command.__name__} has no 'table' parameter")
    names = [f.name for f in fields(TableOptions)]
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name == "table":
            parameters.extend(_typer_parameters())
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    def run(**kwargs: Any) -> None:
        table = TableOptions(**{name: kwargs.pop(name) for name in names})
        command(table=table, **kwargs)

    run.__name__ = command.__name__
    run.__qualname__ = command.__qualname__
    run.__module__ = command.__module__
    run.__doc__ = command.__doc__
    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run
