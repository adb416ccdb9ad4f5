from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    NEW: _ClassVar[Status]
    DUPLICATE: _ClassVar[Status]
    CONFLICT: _ClassVar[Status]
    IN_PROGRESS: _ClassVar[Status]
    UNKNOWN: _ClassVar[Status]
    BEYOND_HORIZON: _ClassVar[Status]

class RecordState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECORD_STATE_UNSPECIFIED: _ClassVar[RecordState]
    PENDING: _ClassVar[RecordState]
    UNKNOWN_COMPLETION: _ClassVar[RecordState]
    COMPLETED: _ClassVar[RecordState]
STATUS_UNSPECIFIED: Status
NEW: Status
DUPLICATE: Status
CONFLICT: Status
IN_PROGRESS: Status
UNKNOWN: Status
BEYOND_HORIZON: Status
RECORD_STATE_UNSPECIFIED: RecordState
PENDING: RecordState
UNKNOWN_COMPLETION: RecordState
COMPLETED: RecordState

class Intent(_message.Message):
    __slots__ = ("raw", "json")
    RAW_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    raw: bytes
    json: bytes
    def __init__(self, raw: _Optional[bytes] = ..., json: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("namespace", "key", "state", "intent_digest", "first_seen", "lease_expires", "completed_at", "token", "attempts", "event_time", "event_id", "claimant", "outcome", "other_events", "generation")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMANT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OTHER_EVENTS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    state: RecordState
    intent_digest: bytes
    first_seen: float
    lease_expires: float
    completed_at: float
    token: int
    attempts: int
    event_time: float
    event_id: bytes
    claimant: bytes
    outcome: bytes
    other_events: int
    generation: int
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., state: _Optional[_Union[RecordState, str]] = ..., intent_digest: _Optional[bytes] = ..., first_seen: _Optional[float] = ..., lease_expires: _Optional[float] = ..., completed_at: _Optional[float] = ..., token: _Optional[int] = ..., attempts: _Optional[int] = ..., event_time: _Optional[float] = ..., event_id: _Optional[bytes] = ..., claimant: _Optional[bytes] = ..., outcome: _Optional[bytes] = ..., other_events: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("namespace", "key", "intent", "event_time", "event_id", "claimant", "lease", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMANT_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    intent: Intent
    event_time: float
    event_id: bytes
    claimant: bytes
    lease: float
    request_id: bytes
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., intent: _Optional[_Union[Intent, _Mapping]] = ..., event_time: _Optional[float] = ..., event_id: _Optional[bytes] = ..., claimant: _Optional[bytes] = ..., lease: _Optional[float] = ..., request_id: _Optional[bytes] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("status", "token", "retry_after", "record")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    status: Status
    token: int
    retry_after: float
    record: Record
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., token: _Optional[int] = ..., retry_after: _Optional[float] = ..., record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class ClaimBatchRequest(_message.Message):
    __slots__ = ("namespace", "keys", "intents", "event_times", "claimant", "request_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    INTENTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIMES_FIELD_NUMBER: _ClassVar[int]
    CLAIMANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    intents: _containers.RepeatedCompositeFieldContainer[Intent]
    event_times: _containers.RepeatedScalarFieldContainer[float]
    claimant: bytes
    request_id: bytes
    def __init__(self, namespace: _Optional[str] = ..., keys: _Optional[_Iterable[bytes]] = ..., intents: _Optional[_Iterable[_Union[Intent, _Mapping]]] = ..., event_times: _Optional[_Iterable[float]] = ..., claimant: _Optional[bytes] = ..., request_id: _Optional[bytes] = ...) -> None: ...

class ClaimBatchResponse(_message.Message):
    __slots__ = ("statuses", "tokens", "retry_after", "records")
    class RecordsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Record
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[Status]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    retry_after: _containers.RepeatedScalarFieldContainer[float]
    records: _containers.MessageMap[int, Record]
    def __init__(self, statuses: _Optional[_Iterable[_Union[Status, str]]] = ..., tokens: _Optional[_Iterable[int]] = ..., retry_after: _Optional[_Iterable[float]] = ..., records: _Optional[_Mapping[int, Record]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("namespace", "key", "token", "outcome")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    token: int
    outcome: bytes
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., token: _Optional[int] = ..., outcome: _Optional[bytes] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("namespace", "key", "token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    token: int
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("namespace", "key", "token", "lease")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    token: int
    lease: float
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., token: _Optional[int] = ..., lease: _Optional[float] = ...) -> None: ...

class RecordResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class CompleteItem(_message.Message):
    __slots__ = ("key", "token", "outcome")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    token: int
    outcome: bytes
    def __init__(self, key: _Optional[bytes] = ..., token: _Optional[int] = ..., outcome: _Optional[bytes] = ...) -> None: ...

class CompleteBatchRequest(_message.Message):
    __slots__ = ("namespace", "items")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    items: _containers.RepeatedCompositeFieldContainer[CompleteItem]
    def __init__(self, namespace: _Optional[str] = ..., items: _Optional[_Iterable[_Union[CompleteItem, _Mapping]]] = ...) -> None: ...

class ReleaseItem(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    token: int
    def __init__(self, key: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseBatchRequest(_message.Message):
    __slots__ = ("namespace", "items")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    items: _containers.RepeatedCompositeFieldContainer[ReleaseItem]
    def __init__(self, namespace: _Optional[str] = ..., items: _Optional[_Iterable[_Union[ReleaseItem, _Mapping]]] = ...) -> None: ...

class LeasedBatchResponse(_message.Message):
    __slots__ = ("lease_lost",)
    LEASE_LOST_FIELD_NUMBER: _ClassVar[int]
    lease_lost: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease_lost: _Optional[_Iterable[str]] = ...) -> None: ...

class UnresolvedRequest(_message.Message):
    __slots__ = ("namespace", "limit")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    limit: int
    def __init__(self, namespace: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class UnresolvedResponse(_message.Message):
    __slots__ = ("records", "truncated")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    truncated: bool
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...
