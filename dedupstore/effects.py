"""The ``idempotent`` decorator, shared by ``DedupStore`` and the service's sync client.

It needs only ``claim``, ``complete`` and ``release``, so one implementation
serves every authority that has them: an embedded store and a client give the
decorated function the same verdicts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .errors import EffectNotRunError
from .verdicts import ClaimResult, Status

F = TypeVar("F", bound=Callable[..., Any])


class Authority(Protocol):
    def claim(self, namespace: str, key: bytes | str, intent: object = None) -> ClaimResult: ...
    def complete(self, namespace: str, key: bytes | str, token: int, outcome: bytes | str = b"") -> Any: ...
    def release(self, namespace: str, key: bytes | str, token: int) -> None: ...


def default_dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def idempotent(
    authority: Authority,
    namespace: str,
    *,
    key: Callable[..., bytes | str],
    intent: Callable[..., object] | None = None,
    dumps: Callable[[Any], bytes] | None = None,
    loads: Callable[[bytes], Any] | None = None,
    release_on: tuple[type[BaseException], ...] = (),
) -> Callable[[F], F]:
    """See ``DedupStore.idempotent``."""
    enc = dumps or default_dumps
    dec = loads or json.loads

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            k = key(*args, **kwargs)
            res = authority.claim(namespace, k, None if intent is None else intent(*args, **kwargs))
            if res.status is Status.DUPLICATE:
                return dec(res.outcome or b"null")
            if res.status is not Status.NEW:
                raise EffectNotRunError(res)
            assert res.token is not None
            try:
                value = fn(*args, **kwargs)
            except release_on:
                authority.release(namespace, k, res.token)
                raise
            authority.complete(namespace, k, res.token, enc(value))
            return value

        return run  # type: ignore[return-value]

    return wrap
