"""Errors of the Kafka edge (aiokafka's own exceptions never leave :mod:`shadoweval.bus`)."""

from __future__ import annotations

from shadoweval.errors import ShadowEvalError


class BusError(ShadowEvalError):
    """The broker refused or failed an operation (wraps ``aiokafka.errors.KafkaError``).

    Attributes:
        retriable: the operation may succeed later (broker down, leader moving, timeout).
    """

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class BusTimeoutError(BusError):
    """An operation did not complete within its deadline (broker slow or unreachable)."""
