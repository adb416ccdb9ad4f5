"""dedupstore: an embedded, durable idempotency authority for event consumers.

    from dedupstore import DedupStore, Status

    with DedupStore.open("/var/lib/orders-dedup") as store:
        store.ensure_namespace("wallet.settlement.v1", horizon="7d")
        res = store.claim("wallet.settlement.v1", "settlement:w42:r91:p7", {"amount": 100})
        if res.status is Status.NEW:
            ...  # perform the effect, then:
            store.complete("wallet.settlement.v1", "settlement:w42:r91:p7", res.token, b"credited")

The native extension is required: a broken build fails here, loudly.
"""

from . import _native  # noqa: F401  (import first: a missing build must fail at import)
from .errors import (
    DedupError,
    DurabilityError,
    EffectNotRunError,
    ForkedStoreError,
    InvalidDurationError,
    InvalidInputError,
    InvalidIntentError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidTokenError,
    LeaseLostError,
    OutcomeTooLargeError,
    ReplayWindowError,
    ServiceError,
    StoreAlreadyOpenError,
    StoreClosedError,
    StoreFormatError,
    StoreFullError,
    UnauthenticatedError,
    UnknownNamespaceError,
    WriterBusyError,
)
from .namespace import NamespaceConfig, ReplayWindowWarning
from .store import DedupStore
from .verdicts import BatchResult, ClaimResult, Record, RecordState, Status

__version__ = "0.1.0"

__all__ = [
    "BatchResult",
    "ClaimResult",
    "DedupError",
    "DedupStore",
    "DurabilityError",
    "EffectNotRunError",
    "ForkedStoreError",
    "InvalidDurationError",
    "InvalidInputError",
    "InvalidIntentError",
    "InvalidKeyError",
    "InvalidNamespaceError",
    "InvalidTokenError",
    "LeaseLostError",
    "NamespaceConfig",
    "OutcomeTooLargeError",
    "Record",
    "RecordState",
    "ReplayWindowError",
    "ReplayWindowWarning",
    "ServiceError",
    "Status",
    "StoreAlreadyOpenError",
    "StoreClosedError",
    "StoreFormatError",
    "StoreFullError",
    "UnauthenticatedError",
    "UnknownNamespaceError",
    "WriterBusyError",
]
