"""Every error dedupstore raises, importable from the package root.

Input errors are ``ValueError`` subclasses whose message names the limit that was
broken, so a caller can both catch them generically and read what to fix.
"""

from __future__ import annotations

from typing import Any


class DedupError(Exception):
    """Base class of every error raised by dedupstore itself."""


class InvalidInputError(DedupError, ValueError):
    """Bad input from the caller; the message names the violated limit."""


class InvalidNamespaceError(InvalidInputError):
    """A namespace name or configuration breaks a documented limit."""


class UnknownNamespaceError(InvalidInputError):
    """The namespace was never registered with ``ensure_namespace``."""


class InvalidKeyError(InvalidInputError):
    """A key is empty, too long, or not ``bytes``/``str``."""


class InvalidIntentError(InvalidInputError):
    """An intent cannot be canonicalised (type, NaN, infinity, depth, size)."""


class InvalidDurationError(InvalidInputError):
    """A duration is malformed, non-positive, or out of range."""


class InvalidTokenError(InvalidInputError):
    """A token is not a lease token this store could have issued."""


class OutcomeTooLargeError(InvalidInputError):
    """An outcome is larger than the namespace's ``max_outcome_bytes``."""


class ReplayWindowError(InvalidNamespaceError):
    """A declared replay window is longer than the namespace's horizon."""


class LeaseLostError(DedupError):
    """The token is stale or wrong: someone else holds (or held) the lease.

    Nothing was changed by the call that raised it.
    """


class StoreFullError(DedupError):
    """The store reached its configured maximum size; the write was not applied.

    Everything committed before stays committed.
    """


class DurabilityError(DedupError):
    """The disk refused a sync-mode journal write (a failed fdatasync).

    The kernel may have dropped the pages it could not write, so no write of
    this handle is acknowledged any more: every later durable call raises
    this too. Close and reopen the store; the reopen replays what did reach
    the disk.
    """


class WriterBusyError(DedupError):
    """Another process held a partition's write-behind window for
    too long while this one waited to write (docs/guarantees.md); nothing of
    the call was written."""


class StoreFormatError(DedupError):
    """The directory is not a dedupstore store, is corrupt, or has another format version."""


class StoreClosedError(DedupError):
    """The store handle was closed."""


class ForkedStoreError(DedupError):
    """The store was opened in a parent process; a forked child must open its own."""


class StoreAlreadyOpenError(DedupError):
    """This process already holds a handle on that store directory."""


class ServiceError(DedupError):
    """A call to the shared service (``dedupstore.client``) failed for a reason of
    the service rather than of the verdict logic: unreachable after the client's
    retries, deadline exceeded every time, refused, or an internal error.

    ``code`` is the gRPC status code's name (``"UNAVAILABLE"``, ...). Whether a
    claim made by such a call took effect is unknown; retrying it with the same
    ``claimant`` gets its own lease back rather than a second ``NEW``.
    """

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


class UnauthenticatedError(ServiceError):
    """The server requires a token and the call carried none, or a wrong one; nothing was changed."""


class EffectNotRunError(DedupError):
    """``DedupStore.idempotent`` did not run the function: the verdict was not NEW or DUPLICATE.

    ``result`` is the ``ClaimResult``: CONFLICT (see ``result.record``),
    IN_PROGRESS (``result.retry_after``), or UNKNOWN/BEYOND_HORIZON with the
    reconcile ``result.token``.
    """

    def __init__(self, result: Any) -> None:
        super().__init__(f"{result.namespace}/{result.key!r}: {result.status.name}; the function was not run")
        self.result = result
