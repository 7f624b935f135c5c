"""shadow-eval: shadow evaluation of LLM upgrades on live OpenAI-compatible traffic.

The shared core: records (stage-to-stage types), the OpenAI protocol edge, errors,
configuration, the capture-log format, storage and the CLI composition root.
"""

__version__ = "0.1.0"
