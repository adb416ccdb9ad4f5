# Declarations of the plain-C engine in csrc/; the binding is _native.pyx.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "ds_hash.h":
    ctypedef struct ds_hash_key:
        uint64_t k0
        uint64_t k1
    void ds_hash_key_init(ds_hash_key *key, const uint8_t *secret)
    void ds_siphash128(const ds_hash_key *key, const void *data, size_t length, uint8_t *out)
    uint64_t ds_siphash64(const ds_hash_key *key, const void *data, size_t length)
    uint32_t ds_reduce(uint64_t h, uint32_t n)
    uint64_t ds_table_hash(const void *data, size_t length, uint64_t seed) noexcept nogil
    uint32_t ds_crc32(uint32_t crc, const void *data, size_t length)


cdef extern from "ds_canon.h":
    enum:
        DS_CANON_TAG_RAW
        DS_CANON_TAG_STRUCTURED
        DS_BUF_OK
        DS_BUF_TOO_LARGE
        DS_BUF_NOMEM
        DS_BUF_INVALID
        DS_FIELD_NULL
        DS_FIELD_TRUE
        DS_FIELD_FALSE
        DS_FIELD_INT
        DS_FIELD_STRING
    ctypedef struct ds_buf:
        uint8_t *data
        size_t len
        size_t cap
        size_t limit
        int owned
    void ds_buf_init(ds_buf *b, size_t limit)
    void ds_buf_init_in(ds_buf *b, size_t limit, uint8_t *first, size_t cap)
    void ds_buf_free(ds_buf *b)
    int ds_buf_put(ds_buf *b, const void *data, size_t length)
    int ds_buf_put_byte(ds_buf *b, uint8_t c)
    int ds_buf_put_json_string(ds_buf *b, const uint8_t *utf8, size_t length)
    int ds_buf_put_int(ds_buf *b, long long v)
    ctypedef struct ds_canon_field:
        const uint8_t *key
        size_t klen
        int kind
        const uint8_t *text
        size_t tlen
        long long num
    int ds_buf_put_flat_object(ds_buf *b, ds_canon_field *fields, size_t n)


cdef extern from "ds_record.h":
    enum:
        DS_RECORD_VERSION
        DS_RECORD_HEADER
        DS_STATE_PENDING
        DS_STATE_COMPLETED
        DS_F_INTENT
        DS_F_ORIGIN_UNKNOWN
        DS_F_ORIGIN_BEYOND
        DS_REC_OK
        DS_REC_SHORT
        DS_REC_VERSION
        DS_REC_CORRUPT
    int64_t DS_NO_TIME
    ctypedef struct ds_record:
        uint8_t state
        uint8_t flags
        uint32_t attempts
        int64_t first_seen
        int64_t until
        uint64_t token
        uint8_t intent[16]
        int64_t event_time
        uint32_t other_events
        const uint8_t *claimant
        uint32_t claimant_len
        const uint8_t *event_id
        uint32_t event_id_len
        const uint8_t *outcome
        uint32_t outcome_len
    size_t ds_record_size(const ds_record *r)
    size_t ds_record_encode(const ds_record *r, uint8_t *out)
    int ds_record_decode(const uint8_t *buf, size_t length, ds_record *r)


cdef extern from "ds_decide.h":
    ctypedef enum ds_status:
        DS_NEW
        DS_DUPLICATE
        DS_CONFLICT
        DS_IN_PROGRESS
        DS_UNKNOWN
        DS_BEYOND_HORIZON
    ctypedef enum ds_write:
        DS_WRITE_NONE
        DS_WRITE_PUT
    ctypedef struct ds_claim_req:
        int64_t now
        int64_t lease
        int64_t event_time
        int64_t frontier
        const uint8_t *intent
        const uint8_t *claimant
        uint32_t claimant_len
        const uint8_t *event_id
        uint32_t event_id_len
        uint64_t fresh_token
    ctypedef struct ds_claim_out:
        ds_status status
        ds_write write
        uint64_t token
        int64_t retry_after
        int other_event
    enum:
        DS_OP_APPLY
        DS_OP_NOOP
        DS_OP_LEASE_LOST
        DS_OP_OUTCOME_DIFFERS
    void ds_claim_decide(const ds_record *cur, const ds_claim_req *req, ds_record *next, ds_claim_out *out)
    int ds_complete_decide(const ds_record *cur, uint64_t token, const uint8_t *outcome, uint32_t outcome_len,
                           int64_t now, ds_record *next)
    int ds_release_decide(const ds_record *cur, uint64_t token)
    int ds_renew_decide(const ds_record *cur, uint64_t token, int64_t now, int64_t lease, ds_record *next)
    uint64_t ds_next_token(uint64_t *state)


cdef extern from "ds_log.h":
    ctypedef struct ds_log:
        int fd
        uint64_t mapped
        uint64_t reserved
        uint64_t mapped_writes
    void ds_log_init(ds_log *l, int fd, uint64_t map_bytes, uint64_t chunk)
    void *ds_log_span(ds_log *l, uint64_t offset, size_t n)
    int ds_log_write(ds_log *l, const void *p, size_t n, uint64_t offset)
    int ds_log_cut(ds_log *l, uint64_t offset)
    void ds_log_release(ds_log *l) nogil
    int ds_log_prefault(ds_log *l, uint64_t offset, uint64_t length) nogil
    int ds_log_recycle(ds_log *l) nogil


cdef extern from "ds_sort.h":
    ctypedef struct ds_key_ref:
        const void *data
        size_t len
    void ds_sort_keys(void *items, size_t n, size_t size) nogil


# CPython's own lock: taken and released without the GIL (the window's
# lock, a log segment's prefault against its unmapping).
cdef extern from "pythread.h":
    ctypedef void *PyThread_type_lock
    PyThread_type_lock PyThread_allocate_lock()
    void PyThread_free_lock(PyThread_type_lock lock)
    int PyThread_acquire_lock(PyThread_type_lock lock, int waitflag) nogil
    void PyThread_release_lock(PyThread_type_lock lock) nogil
