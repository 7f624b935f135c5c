"""The live (baseline) model's identity, as recorded on every captured exchange.

A model swap changes weights, tokenizer, chat template and sampling defaults (DESIGN §1);
the operator states what they know in :class:`~shadoweval.config.LiveModelSettings`.
The name comes from there, else from the upstream's ``GET /v1/models``
(:func:`shadoweval.model_listing.list_model_ids`), taking the first id listed (vLLM and
SGLang serve one model, so it is the only one).

Fetching never raises: an unreachable upstream, an error status, or a list without ids
yields the name :data:`UNKNOWN_MODEL` (logged), and the builder then records the
``model`` field of each response instead (:func:`resolve_identity`). The upstream is
asked without credentials (the sidecar holds none of its own); when ``/v1/models`` needs
auth, set ``live_model.name``.
"""

from __future__ import annotations

import logging

import httpx

from shadoweval.config import LiveModelSettings
from shadoweval.model_listing import ModelListingError, list_model_ids, models_url_for_display
from shadoweval.records import UNKNOWN_MODEL, ModelIdentity
from shadoweval.redaction import strip_url_credentials

logger = logging.getLogger(__name__)

__all__ = ["UNKNOWN_MODEL", "fetch_live_model", "identity_from_settings", "resolve_identity"]


def identity_from_settings(
    settings: LiveModelSettings, name: str, base_url: str | None
) -> ModelIdentity:
    """Build the identity: ``name``, the hashes and sampling defaults from ``settings``."""
    return ModelIdentity(
        name=name,
        weights_hash=settings.weights_hash,
        tokenizer_hash=settings.tokenizer_hash,
        chat_template_hash=settings.chat_template_hash,
        sampling_defaults=dict(settings.sampling_defaults),
        base_url=None if base_url is None else strip_url_credentials(base_url),
    )


async def fetch_live_model(
    base_url: str,
    settings: LiveModelSettings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = 5.0,
) -> ModelIdentity:
    """Return the live model's identity; never raises.

    Args:
        base_url: the upstream (``http://host:port``, with or without a ``/v1`` suffix);
            credentials in it are used for the request but never recorded.
        settings: what the operator states; a non-empty ``name`` means no request is made.
        transport: an httpx transport (a seam for tests; default: the network).
        timeout_s: whole-request limit, seconds.

    Returns:
        The identity; its name is :data:`UNKNOWN_MODEL` when the upstream could not say.
    """
    if settings.name:
        return identity_from_settings(settings, settings.name, base_url)
    try:
        ids = await list_model_ids(base_url, transport=transport, timeout_s=timeout_s)
    except ModelListingError as exc:
        logger.warning("cannot read the live model name from %s: %s", exc.url, exc.cause)
        return identity_from_settings(settings, UNKNOWN_MODEL, base_url)
    if not ids:
        logger.warning(
            "%s lists no model id; recording %r", models_url_for_display(base_url), UNKNOWN_MODEL
        )
        return identity_from_settings(settings, UNKNOWN_MODEL, base_url)
    return identity_from_settings(settings, ids[0], base_url)


def resolve_identity(identity: ModelIdentity, response_model: str | None) -> ModelIdentity:
    """The identity to record for one exchange.

    When the configured/fetched name is empty or :data:`UNKNOWN_MODEL`, the response's
    ``model`` field names the model instead (when there is one); otherwise ``identity``
    is returned unchanged.
    """
    if identity.name and identity.name != UNKNOWN_MODEL:
        return identity
    if response_model:
        return identity.model_copy(update={"name": response_model})
    if not identity.name:
        return identity.model_copy(update={"name": UNKNOWN_MODEL})
    return identity
