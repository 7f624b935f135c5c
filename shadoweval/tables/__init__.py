"""Recorded tables: benchmark or production outputs read into :class:`RecordedRow` s.

A *recorded table* holds prompts and the answers one model gave them (AlpacaEval,
MT-Bench, BFCL, or an operator's own CSV/Parquet/JSON export). This package reads them
through pandas (:func:`read_table`), maps columns (:class:`TableMapping`, or a preset in
:data:`PRESETS`) and returns rows plus rejected rows (:func:`load_recorded_rows`). Its
users are ``shadow-eval import`` (tables → capture log) and ``shadow-eval mock-llm``
(a test-double model server answering from a table).
"""

from shadoweval.tables.bfcl_schema import (
    BFCL_TYPE_MAP,
    BfclLanguage,
    bfcl_function_to_tool,
    bfcl_functions_to_openai_tools,
    convert_bfcl_schema,
)
from shadoweval.tables.keys import canonical_messages, message_text, prompt_key
from shadoweval.tables.mapping import LatencyUnit, TableMapping, ToolsFormat
from shadoweval.tables.presets import (
    PRESETS,
    Preset,
    bfcl_category,
    load_recorded_rows,
    preset,
)
from shadoweval.tables.reader import TableFormat, detect_format, read_table, table_files
from shadoweval.tables.rows import LoadResult, RecordedRow, RejectedRow, rows_from_frame
from shadoweval.tables.values import OutputFormat

__all__ = [
    "BFCL_TYPE_MAP",
    "PRESETS",
    "BfclLanguage",
    "LatencyUnit",
    "LoadResult",
    "OutputFormat",
    "Preset",
    "RecordedRow",
    "RejectedRow",
    "TableFormat",
    "TableMapping",
    "ToolsFormat",
    "bfcl_category",
    "bfcl_function_to_tool",
    "bfcl_functions_to_openai_tools",
    "canonical_messages",
    "convert_bfcl_schema",
    "detect_format",
    "load_recorded_rows",
    "message_text",
    "preset",
    "prompt_key",
    "read_table",
    "rows_from_frame",
    "table_files",
]
