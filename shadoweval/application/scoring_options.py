"""How a stored run is scored (:class:`ScoringOptions`) and the similarity encoder they name
(:func:`make_encoder`): the options :mod:`shadoweval.application.scoring` and its worker
processes share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shadoweval.compare.encoders import Encoder, HashingEncoder, MiniLMEncoder
from shadoweval.config import CompareSettings
from shadoweval.errors import ConfigError

__all__ = ["ScoringOptions", "encoder_backend_id", "make_encoder", "options_encoder"]


@dataclass(frozen=True, slots=True)
class ScoringOptions:
    """How a stored run is scored: one value for :func:`score_stored_run`, the multi-process
    path and each worker process (picklable: it crosses a ``spawn``).

    ``encoder``/``device``/``batch_size``/``model_path``/``backend``/``cache_dir`` as in
    :func:`make_encoder`; ``structured_task_types``, ``rescore``, ``refusal_patterns``,
    ``covered_scripts`` and ``embedding_cache`` as in :func:`compare_run`. ``backend``
    defaults to the reference ``torch-fp32`` here; :meth:`from_settings` carries the
    settings' default ``auto``.
    """

    encoder: str = "minilm"
    device: str = "cpu"
    batch_size: int = 64
    model_path: Path | None = None
    backend: str = "torch-fp32"
    cache_dir: Path | None = None
    structured_task_types: frozenset[str] = frozenset()
    rescore: bool = False
    refusal_patterns: tuple[str, ...] | None = None
    covered_scripts: frozenset[str] | None = None
    embedding_cache: bool = True

    def __post_init__(self) -> None:
        """Refuse a backend the hashing encoder cannot take before any database work.

        Raises:
            ConfigError: (field ``compare.backend``) a backend other than ``auto`` or
                ``torch-fp32`` with ``encoder="hashing"``.
        """
        if self.encoder == "hashing":
            _check_hashing_backend(self.backend)

    @classmethod
    def from_settings(cls, compare: CompareSettings, **overrides: Any) -> ScoringOptions:
        """Options from ``compare`` settings (encoder, device, batch size, model path, backend,
        cache dir, refusal patterns, covered scripts, embedding cache, structured types),
        then ``overrides`` (e.g. the CLI's flags)."""
        values: dict[str, Any] = {
            "encoder": compare.encoder,
            "device": compare.device,
            "batch_size": compare.batch_size,
            "model_path": compare.model_path,
            "backend": compare.backend,
            "cache_dir": compare.cache_dir,
            "structured_task_types": frozenset(compare.structured_task_types),
            "refusal_patterns": compare.refusal_patterns,
            "covered_scripts": compare.covered_scripts(),
            "embedding_cache": compare.embedding_cache,
        }
        values.update(overrides)
        return cls(**values)


def make_encoder(
    name: str,
    *,
    device: str = "cpu",
    batch_size: int = 64,
    model_path: Path | None = None,
    backend: str = "torch-fp32",
    cache_dir: Path | None = None,
) -> Encoder:
    """Build the similarity encoder: ``minilm`` (bundled all-MiniLM-L6-v2) or ``hashing``.

    ``device`` is a torch device (``cpu``, ``cuda``); ``batch_size`` pieces per forward
    pass; ``model_path`` a local sentence-transformers model directory used instead of the
    bundled weights (``compare.model_path``; MiniLM only); ``backend`` the inference backend
    (:data:`shadoweval.compare.backends.BACKENDS`; ``auto`` measures and picks, DESIGN §6) and
    ``cache_dir`` where ONNX exports and the ``auto`` choice are kept (default
    :func:`shadoweval.compare.backends.default_cache_dir`). The hashing encoder has no inference
    backend: it accepts ``auto`` and ``torch-fp32`` (nothing to choose) and refuses the others.

    Raises:
        ConfigError: an unknown encoder name or backend, a backend this device cannot run,
            the model cannot be loaded, or ``model_path``/another backend is given with the
            hashing encoder.
    """
    if name == "minilm":
        return MiniLMEncoder(
            model_path, device=device, batch_size=batch_size, backend=backend, cache_dir=cache_dir
        )
    if name == "hashing" and model_path is not None:
        raise ConfigError(
            "the hashing encoder has no model: compare.model_path applies to minilm only",
            field="compare.model_path",
            value=str(model_path),
        )
    if name == "hashing":
        _check_hashing_backend(backend)
        return HashingEncoder()
    raise ConfigError(
        f"encoder {name!r} is not known: use minilm or hashing", field="compare.encoder", value=name
    )


def options_encoder(options: ScoringOptions) -> Encoder:
    """:func:`make_encoder` with ``options``' encoder settings (raises as it does)."""
    return make_encoder(
        options.encoder,
        device=options.device,
        batch_size=options.batch_size,
        model_path=options.model_path,
        backend=options.backend,
        cache_dir=options.cache_dir,
    )


def encoder_backend_id(encoder: Encoder) -> str | None:
    """The inference backend ``encoder`` runs on (``report.backend``); ``None`` when it has
    none (the hashing encoder)."""
    backend_id = getattr(encoder, "backend_id", None)
    return str(backend_id) if backend_id is not None else None


def _check_hashing_backend(backend: str) -> None:
    if backend not in ("auto", "torch-fp32"):
        raise ConfigError(
            f"the hashing encoder has no inference backend: compare.backend {backend!r} "
            "applies to minilm only (use auto or torch-fp32)",
            field="compare.backend",
            value=backend,
        )
