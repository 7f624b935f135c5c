"""Directional harm detectors: yes/no facts about one side's answer, and tool changes.

Divergence says *how much* an answer changed; these detectors say whether one side shows
a known failure. Each is a pure function of one side (the gate pairs them: harm is the
candidate showing it where the baseline did not, more often than the reverse,
:mod:`shadoweval.stats.checks.harms`). :func:`side_harms` runs all of them for one side and
returns the :class:`~shadoweval.records.HarmKind` values that fired, in declaration
order; :func:`tool_changes` compares both sides' tool calls. Pure: no I/O, no clock.

Which text each detector reads: template markers read the side text (content plus one
line per tool call, :func:`shadoweval.compare.pair.side_text`), as :attr:`PairScore.template_leaks`
does; degeneration, refusal, language switch and placeholder JSON read the content text
only — tool-call arguments are data, and data repeats by design (BFCL
``parallel_multiple_function_179`` passes a 52-card deck, which deflates like a loop).

Measured on the real files in ``../shared/data`` (pinned by
``tests/compare/test_harms_real.py``; recall and precision in docs/gate.md "Detectors
measured", ``scripts/detector_recall.py``): degeneration flags 47 of 805
Llama-3.1-8B-Instruct-Turbo AlpacaEval answers (every one a loop, read by eye), 0 of 805
Llama-3-8B, 1 of 805 Qwen1.5-72B (a real CJK loop), 0 of 805 Qwen2-72B and 1 of 640
MT-Bench answers (a Vicuna-13B answer looping in its code); the language switch flags 42
Qwen1.5-72B and 3 Qwen2-72B answers with Chinese spliced into English (every one read).
"""

from shadoweval.compare.harms.degeneration import (
    DEGENERATION_MIN_CHARS,
    DEGENERATION_RATIO_MIN,
    DEGENERATION_WINDOWS_CHARS,
    is_degenerate,
    window_compression_ratio,
)
from shadoweval.compare.harms.language import (
    LANGUAGE_SWITCH_MIN_ANSWER_LETTERS,
    LANGUAGE_SWITCH_MIN_PROMPT_LETTERS,
    asks_for_language,
    cjk_fragments,
    dominant_script,
    is_cjk_fragment_switch,
    is_language_switch,
    script_letter_counts,
)
from shadoweval.compare.harms.placeholder_json import is_placeholder_json
from shadoweval.compare.harms.refusal import (
    DEFAULT_REFUSAL_PATTERNS,
    REFUSAL_WINDOW_CHARS,
    RefusalPatterns,
    compile_refusal_patterns,
    is_refusal,
)
from shadoweval.compare.harms.repetition import (
    is_line_loop,
    is_word_loop,
    longest_tandem_repeat,
    repetition_units,
)
from shadoweval.compare.harms.sides import (
    SideContext,
    has_template_markers,
    is_missing_finish_reason,
    is_runaway_length,
    side_harms,
)
from shadoweval.compare.harms.tool_changes import normalised_arguments, tool_changes

__all__ = [
    "DEFAULT_REFUSAL_PATTERNS",
    "DEGENERATION_MIN_CHARS",
    "DEGENERATION_RATIO_MIN",
    "DEGENERATION_WINDOWS_CHARS",
    "LANGUAGE_SWITCH_MIN_ANSWER_LETTERS",
    "LANGUAGE_SWITCH_MIN_PROMPT_LETTERS",
    "REFUSAL_WINDOW_CHARS",
    "RefusalPatterns",
    "SideContext",
    "asks_for_language",
    "cjk_fragments",
    "compile_refusal_patterns",
    "dominant_script",
    "has_template_markers",
    "is_cjk_fragment_switch",
    "is_degenerate",
    "is_language_switch",
    "is_line_loop",
    "is_missing_finish_reason",
    "is_placeholder_json",
    "is_refusal",
    "is_runaway_length",
    "is_word_loop",
    "longest_tandem_repeat",
    "normalised_arguments",
    "repetition_units",
    "script_letter_counts",
    "side_harms",
    "tool_changes",
    "window_compression_ratio",
]
