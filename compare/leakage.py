"""Chat-template role markers that leaked into a model's output text.

A model swap changes the chat template as well as the weights (DESIGN §1); a wrong or
mismatched template shows up as role or end-of-turn markers in the generated text
(``<|im_start|>assistant``, ``[/INST]``, ``<|eot_id|>``), or as a model that runs on
into the next turn. Serving stacks normally consume these special tokens, so finding
one in ``content`` is a template or tokenizer problem.

Markers are matched as exact, case-sensitive substrings. ``</s>`` is also HTML's
strikethrough close tag, so it can fire on outputs that write HTML; ``<s>`` is left out
for that reason. Sources: the chat templates (``tokenizer_config.json``) of ChatML
(Qwen, Yi, OpenHermes), Llama 2, Llama 3/3.1, Llama 4, Mistral, Gemma, Zephyr, Phi-3/4,
Command-R and DeepSeek.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TEMPLATE_MARKERS", "template_leaks"]

TEMPLATE_MARKERS: Final[tuple[str, ...]] = (
    # ChatML (Qwen, Yi, OpenHermes) and GPT-style end of text
    "<|im_start|>",
    "<|im_end|>",
    "<|im_sep|>",
    "<|endoftext|>",
    # Llama 2 / Mistral
    "[INST]",
    "[/INST]",
    "<<SYS>>",
    "<</SYS>>",
    "</s>",
    # Llama 3 / 3.1
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    # Llama 4
    "<|header_start|>",
    "<|header_end|>",
    "<|eot|>",
    # Gemma
    "<start_of_turn>",
    "<end_of_turn>",
    # Zephyr, Phi-3
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    # Command-R
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    # DeepSeek (full-width bars and U+2581)
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
)
"""Known chat-template special tokens, searched for in output text."""


def template_leaks(text: str | None) -> tuple[str, ...]:
    """Return the template markers found in ``text``, sorted and unique.

    ``None`` or an empty text has no leaks. Each marker is reported once however often
    it occurs; the result holds the marker strings only. Pure and cheap (one substring
    search per marker).
    """
    if not text:
        return ()
    return tuple(sorted(marker for marker in TEMPLATE_MARKERS if marker in text))
