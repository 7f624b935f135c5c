"""The verdict names an API translation as a party to any difference (issue 32 item 2)."""

from __future__ import annotations

from shadoweval.records import ReplayPass, translation_loss_fields, translation_note


def test_losses_are_counted_by_field_with_indices_folded() -> None:
    missing = (
        "temperature",  # a sampling parameter left to the server: not a loss
        "top_k: no chat-completions field, dropped",
        "messages[0].content[1].cache_control: prompt-caching hint dropped",
        "messages[2].content[0].cache_control: prompt-caching hint dropped",
    )
    assert translation_loss_fields(missing) == {
        "top_k": 1,
        "messages[].content[].cache_control": 2,
    }


def test_the_note_sums_the_passes_and_names_the_losses() -> None:
    assert translation_note([ReplayPass(source="kafka")]) is None
    passes = [
        ReplayPass(
            source="kafka",
            translated={"/v1/chat/completions": 8},
            translation_losses={"top_k": 8, "thinking": 1},
        ),
        ReplayPass(
            source="kafka",
            translated={"/v1/chat/completions": 4},
            translation_losses={"top_k": 4},
        ),
    ]
    note = translation_note(passes)
    assert note is not None
    assert "12 as /v1/chat/completions" in note
    assert "dropped: top_k ×12, thinking ×1" in note
    assert "not the model" in note
