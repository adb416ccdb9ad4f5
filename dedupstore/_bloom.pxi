# Included at the end of _native.pyx (it uses that module's cimports, Hasher and
# StoreFormatError): the Python face of the blocked Bloom filter in csrc/ds_bloom.c.

from cpython.buffer cimport PyObject_CheckBuffer

cdef extern from "ds_bloom.h":
    enum:
        DS_BLOOM_VERSION
        DS_BLOOM_BLOCK_BYTES
        DS_BLOOM_MAX_K
        DS_BLOOM_HEADER_BYTES
        DS_BLOOM_TRAILER_BYTES
        DS_BLOOM_OK
        DS_BLOOM_EINVAL
        DS_BLOOM_ETOOBIG
        DS_BLOOM_ENOMEM
        DS_BLOOM_ESHORT
        DS_BLOOM_EMAGIC
        DS_BLOOM_EVERSION
        DS_BLOOM_EHEADER
        DS_BLOOM_ELENGTH
        DS_BLOOM_ECHECKSUM
    uint64_t DS_BLOOM_MAX_BLOCKS
    ctypedef struct ds_bloom:
        uint64_t *bits
        uint64_t nblocks
        uint64_t nkeys
        uint64_t tag
        unsigned k
    int ds_bloom_load(double fp_rate, double *keys_per_block, unsigned *k)
    int ds_bloom_blocks(uint64_t n_keys, double keys_per_block, uint64_t *nblocks)
    double ds_bloom_fp_model(double keys_per_block, unsigned k)
    int ds_bloom_init(ds_bloom *b, uint64_t nblocks, unsigned k)
    void ds_bloom_free(ds_bloom *b)
    size_t ds_bloom_nbytes(const ds_bloom *b)
    void ds_bloom_add(ds_bloom *b, uint64_t h)
    int ds_bloom_maybe(const ds_bloom *b, uint64_t h)
    void ds_bloom_add_many(ds_bloom *b, const uint64_t *h, size_t n)
    size_t ds_bloom_maybe_many(const ds_bloom *b, const uint64_t *h, size_t n, uint8_t *out)
    size_t ds_bloom_serialized_size(const ds_bloom *b)
    size_t ds_bloom_write(const ds_bloom *b, uint8_t *out)
    int ds_bloom_read(ds_bloom *b, const uint8_t *buf, size_t length)
    const char *ds_bloom_strerror(int code)
    # One key hash tested against many filters (ds_bloom.h, inline there).
    ctypedef struct ds_bloom_probe:
        uint64_t x
        unsigned k
    void ds_bloom_probe_init(ds_bloom_probe *q, uint64_t h) noexcept nogil
    void ds_bloom_probe_fetch(const ds_bloom *b, const ds_bloom_probe *q) noexcept nogil
    int ds_bloom_probe_maybe(const ds_bloom *b, ds_bloom_probe *q) noexcept nogil


# Domain string of BloomFilter.hasher_tag: a fingerprint of a store's secret.
cdef bytes _BLOOM_TAG_DOMAIN = b"dedupstore/bloom-tag/v1"


# The load and k that meet each rate a filter was sized for: the search costs
# a few hundred microseconds to a few milliseconds (csrc/ds_bloom.h), and a
# store makes filters at few rates (the prefilter's, LIVE_FP_RATE) again and
# again, in turn. Read and written with the GIL held; at most _SIZED_MAX rates
# kept. The store's own rates are sized at import (bloom_sizing), so that no
# claim (the first one to seed a live filter) pays for the search.
cdef dict _sized = {}
cdef int _SIZED_MAX = 64


cdef tuple _sizing(double rate, int *rc):
    # (keys per block, k) for ``rate``, or None with rc[0] the error.
    cdef double load
    cdef unsigned kk
    cdef tuple known = _sized.get(rate)
    rc[0] = DS_BLOOM_OK
    if known is None:
        rc[0] = ds_bloom_load(rate, &load, &kk)
        if rc[0] != DS_BLOOM_OK:
            return None
        if len(_sized) >= _SIZED_MAX:
            _sized.clear()
        known = _sized[rate] = (load, kk)
    return known


def bloom_sizing(fp_rate: float) -> tuple:
    """(keys per 512-bit block, probes per key) of a filter sized for
    ``fp_rate``. The search is done once per rate and process and kept;
    calling this ahead takes it off the first filter made at that rate."""
    cdef double rate = fp_rate
    cdef int rc
    if not (0.0 < rate < 1.0):
        raise ValueError(f"fp_rate must be in (0, 1); got {fp_rate!r}")
    cdef tuple known = _sizing(rate, &rc)
    if known is None:
        raise ValueError(f"Bloom filter at fp_rate {fp_rate!r}: {_bloom_error(rc)}")
    return known


cdef int _bloom_params(uint64_t n_keys, double rate, uint64_t *nblocks, unsigned *k) except? -100:
    cdef int rc
    cdef tuple known = _sizing(rate, &rc)
    if known is None:
        return rc
    rc = ds_bloom_blocks(n_keys, <double>known[0], nblocks)
    if rc == DS_BLOOM_OK:
        k[0] = <unsigned>known[1]
    return rc


cdef str _bloom_error(int rc):
    return (<bytes>ds_bloom_strerror(rc)).decode("ascii")


cdef class BloomFilter:
    """A blocked Bloom filter over 64-bit key hashes: a negative prefilter only.

    ``maybe*`` answering False means the key was certainly never added; True means
    it may have been, and must be confirmed in LMDB. Insert-only. Sized at
    construction for ``n_keys`` keys at false-positive rate ``fp_rate`` (the model
    and the hash scheme are documented in csrc/ds_bloom.h). Not safe for concurrent
    mutation: every method holds the GIL, so Python threads are serialised.
    """

    cdef ds_bloom b

    def __cinit__(self):
        self.b.bits = NULL
        self.b.nblocks = 0
        self.b.nkeys = 0
        self.b.tag = 0
        self.b.k = 0

    def __dealloc__(self):
        ds_bloom_free(&self.b)

    def __init__(self, n_keys: int, fp_rate: float, tag: int = 0):
        cdef uint64_t nblocks = 0
        cdef unsigned k = 0
        cdef double rate = fp_rate
        cdef uint64_t t = tag
        cdef int rc
        if n_keys < 0:
            raise ValueError(f"n_keys must be >= 0; got {n_keys}")
        if not (0.0 < rate < 1.0):
            raise ValueError(f"fp_rate must be in (0, 1); got {fp_rate!r}")
        rc = _bloom_params(<uint64_t>n_keys, rate, &nblocks, &k)
        if rc == DS_BLOOM_OK:
            ds_bloom_free(&self.b)
            rc = ds_bloom_init(&self.b, nblocks, k)
        if rc == DS_BLOOM_ENOMEM:
            raise MemoryError(f"Bloom filter of {nblocks * DS_BLOOM_BLOCK_BYTES} bytes: {_bloom_error(rc)}")
        if rc != DS_BLOOM_OK:
            raise ValueError(f"Bloom filter for {n_keys} keys at fp_rate {fp_rate!r}: {_bloom_error(rc)}")
        self.b.tag = t

    cdef inline int _ready(self) except -1:
        if self.b.bits == NULL:
            raise ValueError("BloomFilter is not initialised")
        return 0

    # -- hot path: precomputed 64-bit hashes ---------------------------------

    def add_hash(self, uint64_t h) -> None:
        self._ready()
        ds_bloom_add(&self.b, h)

    def maybe_hash(self, uint64_t h) -> bool:
        self._ready()
        return ds_bloom_maybe(&self.b, h) != 0

    def add_hashes(self, hashes) -> None:
        """Add many hashes: a C-contiguous 1-D buffer of unsigned 64-bit integers
        (``array('Q')``, a numpy ``uint64`` array), or any non-buffer iterable of
        ints. Any other buffer (bytes, ``array('I')``, signed) is a TypeError. An
        int out of range raises OverflowError after the ones before it were added."""
        cdef const uint64_t[::1] view
        cdef uint64_t h
        self._ready()
        if _u64_buffer(hashes):
            view = hashes
            if view.shape[0]:
                ds_bloom_add_many(&self.b, &view[0], <size_t>view.shape[0])
            return
        for x in hashes:
            h = x
            ds_bloom_add(&self.b, h)

    def maybe_hashes(self, hashes) -> bytes:
        """One byte per hash, 1 for "maybe present" and 0 for "absent"; ``hashes``
        as for :meth:`add_hashes`. ``result.count(1)`` is the number of maybes."""
        cdef const uint64_t[::1] view
        cdef bytes out
        cdef uint8_t *o
        cdef Py_ssize_t i = 0, n
        self._ready()
        if _u64_buffer(hashes):
            view = hashes
            n = view.shape[0]
            out = PyBytes_FromStringAndSize(NULL, n)
            if n:
                ds_bloom_maybe_many(&self.b, &view[0], <size_t>n, <uint8_t *>PyBytes_AS_STRING(out))
            return out
        if not isinstance(hashes, (list, tuple)):
            hashes = list(hashes)
        n = len(hashes)
        out = PyBytes_FromStringAndSize(NULL, n)
        o = <uint8_t *>PyBytes_AS_STRING(out)
        for i in range(n):
            o[i] = <uint8_t>ds_bloom_maybe(&self.b, <uint64_t>hashes[i])
        return out

    # -- convenience: hash with the store's keyed SipHash ----------------------

    def add(self, Hasher hasher, bytes key) -> None:
        """Add ``key``, hashed as ``hasher.hash64(key)``."""
        self._ready()
        ds_bloom_add(&self.b, ds_siphash64(&hasher.key, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)))

    def maybe(self, Hasher hasher, bytes key) -> bool:
        """False if ``key`` (hashed as ``hasher.hash64(key)``) was certainly never added."""
        self._ready()
        return ds_bloom_maybe(&self.b, ds_siphash64(&hasher.key, PyBytes_AS_STRING(key),
                                                    PyBytes_GET_SIZE(key))) != 0

    def add_keys(self, Hasher hasher, keys) -> None:
        """Add every ``bytes`` key of an iterable (the build scan of a sealed generation)."""
        cdef bytes kb
        self._ready()
        for key in keys:
            kb = key
            ds_bloom_add(&self.b, ds_siphash64(&hasher.key, PyBytes_AS_STRING(kb), PyBytes_GET_SIZE(kb)))

    @staticmethod
    def hasher_tag(Hasher hasher) -> int:
        """A fingerprint of ``hasher``'s secret (a SipHash output: it does not reveal
        the secret), to pass as ``tag`` and as ``from_bytes(expected_tag=...)`` so a
        filter built under another store's secret is refused instead of misread."""
        return ds_siphash64(&hasher.key, PyBytes_AS_STRING(_BLOOM_TAG_DOMAIN), PyBytes_GET_SIZE(_BLOOM_TAG_DOMAIN))

    # -- shape -----------------------------------------------------------------

    @property
    def k(self) -> int:
        """Probes (bits set) per key."""
        return self.b.k

    @property
    def nblocks(self) -> int:
        """64-byte blocks in the bit array."""
        return self.b.nblocks

    @property
    def nbytes(self) -> int:
        """Bytes of the bit array (the filter's memory, less this object's header)."""
        return ds_bloom_nbytes(&self.b)

    @property
    def count(self) -> int:
        """Keys added so far (every add, duplicates included)."""
        return self.b.nkeys

    @property
    def tag(self) -> int:
        """The caller-defined 64-bit tag stored with the filter."""
        return self.b.tag

    @property
    def expected_fp_rate(self) -> float:
        """The model's false-positive rate at the current count (an upper estimate
        if some adds were duplicates)."""
        if self.b.nblocks == 0:
            return 0.0
        return ds_bloom_fp_model(<double>self.b.nkeys / <double>self.b.nblocks, self.b.k)

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + ds_bloom_nbytes(&self.b)

    def __repr__(self) -> str:
        return (f"<BloomFilter k={self.b.k} nblocks={self.b.nblocks} nbytes={ds_bloom_nbytes(&self.b)} "
                f"count={self.b.nkeys}>")

    # -- serialised form (csrc/ds_bloom.h, "Serialised form") ------------------

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialised form."""
        cdef size_t n
        cdef bytes out
        self._ready()
        n = ds_bloom_serialized_size(&self.b)
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>n)
        ds_bloom_write(&self.b, <uint8_t *>PyBytes_AS_STRING(out))
        return out

    @staticmethod
    def from_bytes(data, expected_tag=None) -> BloomFilter:
        """Load a filter written by :meth:`to_bytes` (any bytes-like object).

        Raises StoreFormatError, naming the problem, for anything that is not an
        intact version-1 filter (short, bad magic, other version, bad header, length
        mismatch, checksum mismatch), and for a tag other than ``expected_tag``."""
        cdef const unsigned char[::1] view = data
        cdef BloomFilter f = BloomFilter.__new__(BloomFilter)
        cdef Py_ssize_t n = view.shape[0]
        cdef int rc
        cdef uint64_t want
        rc = ds_bloom_read(&f.b, &view[0] if n else NULL, <size_t>n)
        if rc == DS_BLOOM_ENOMEM:
            raise MemoryError(f"loading a Bloom filter of {n} bytes: {_bloom_error(rc)}")
        if rc != DS_BLOOM_OK:
            raise StoreFormatError(f"Bloom filter refused ({n} bytes): {_bloom_error(rc)}")
        if expected_tag is not None:
            want = expected_tag
            if f.b.tag != want:
                raise StoreFormatError(
                    f"Bloom filter refused: built for another hash key or owner (tag {f.b.tag:#018x}, "
                    f"expected {want:#018x})")
        return f


cdef bint _u64_buffer(obj) except -1:
    """True for a buffer of 8-byte unsigned integers (read as raw hashes), False for
    a non-buffer iterable (read as ints); TypeError for any other buffer, so packed
    bytes or 32-bit arrays are never silently taken one small integer at a time."""
    cdef object mv
    if isinstance(obj, (list, tuple)) or not PyObject_CheckBuffer(obj):
        return False
    mv = memoryview(obj)
    if mv.itemsize == 8 and mv.ndim == 1 and mv.format.lstrip("@=<") in ("Q", "L"):
        return True
    raise TypeError(f"hashes must be unsigned 64-bit integers: an iterable of int, or a 1-D buffer of format 'Q' "
                    f"(array('Q'), numpy uint64); got a buffer of format {mv.format!r}, itemsize {mv.itemsize}")
