"""Trace presets: LLM call logs an application already keeps, read as recorded rows.

``otel_genai`` (OpenTelemetry GenAI spans in OTLP/JSON, :mod:`.otel`), ``langfuse``
(Langfuse generations, :mod:`.langfuse`) and ``litellm`` (LiteLLM
``StandardLoggingPayload`` logs, :mod:`.litellm`) turn each recorded call into a
:class:`~shadoweval.tables.RecordedRow`; a record that is not a chat call, has no content
or does not parse is a :class:`~shadoweval.tables.RejectedRow` with its reason.
"""

from shadoweval.tables.traces.langfuse import load_langfuse
from shadoweval.tables.traces.litellm import load_litellm
from shadoweval.tables.traces.otel import load_otel

__all__ = ["load_langfuse", "load_litellm", "load_otel"]
