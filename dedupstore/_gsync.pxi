# Included at the end of _native.pyx: the Python face of the group fdatasync
# thread in csrc/ds_gsync.c, which the sync-mode journal (dedupstore/journal.py)
# appends through.

from libc.stdlib cimport free, malloc

cdef extern from "ds_gsync.h":
    ctypedef struct ds_gsync:
        pass
    int ds_gsync_init(ds_gsync *g, int fd) nogil
    void ds_gsync_appended(ds_gsync *g, uint64_t end) nogil
    int ds_gsync_wait(ds_gsync *g, uint64_t mark, int *waited) nogil
    int ds_gsync_switch(ds_gsync *g, int fd, uint64_t base) nogil
    void ds_gsync_state(ds_gsync *g, uint64_t *appended, uint64_t *synced, uint64_t *syncs, uint64_t *busy_ns) nogil
    void ds_gsync_stop(ds_gsync *g) nogil
    void ds_gsync_destroy(ds_gsync *g) nogil


cdef class GroupSync:
    """One background thread (in C, never holding the GIL) that fdatasyncs
    ``fd`` for every writer: writers append, report how far the file now goes
    (:meth:`appended`, logical positions that carry on over :meth:`switch`)
    and :meth:`wait` for an fdatasync that covers their record. A failed
    fdatasync fails every later wait (OSError with its errno)."""

    cdef ds_gsync *_g
    cdef object _pid

    def __cinit__(self, int fd):
        cdef int e
        self._g = <ds_gsync *>malloc(sizeof(ds_gsync))
        if self._g is NULL:
            raise MemoryError()
        e = ds_gsync_init(self._g, fd)
        if e:
            free(self._g)
            self._g = NULL
            raise OSError(e, f"starting the journal's fdatasync thread: {os.strerror(e)}")
        self._pid = os.getpid()

    def __init__(self, int fd):
        pass  # all done in __cinit__ (so the signature is visible to stubtest)

    def appended(self, uint64_t end):
        """Writers appended up to logical position ``end``."""
        ds_gsync_appended(self._g, end)

    def wait(self, uint64_t mark):
        """Return once an fdatasync covered logical position ``mark``: True if
        this call had to wait for one, False if one already had."""
        cdef int waited = 0
        cdef int rc
        with nogil:
            rc = ds_gsync_wait(self._g, mark, &waited)
        if rc:
            raise OSError(rc, os.strerror(rc))
        return bool(waited)

    def switch(self, int fd, uint64_t base):
        """Later fdatasyncs cover ``fd``, whose offset 0 is logical position
        ``base``, once every append to the old file is synced (this waits for
        that). Raises OSError if an fdatasync failed (the switch is made)."""
        cdef int rc
        with nogil:
            rc = ds_gsync_switch(self._g, fd, base)
        if rc:
            raise OSError(rc, os.strerror(rc))

    def state(self):
        """(appended, synced, fdatasyncs run, seconds spent in them) now."""
        cdef uint64_t appended, synced, syncs, busy_ns
        ds_gsync_state(self._g, &appended, &synced, &syncs, &busy_ns)
        return appended, synced, syncs, busy_ns / 1e9

    def stop(self):
        """Sync what was appended, then end the thread (idempotent)."""
        if self._g is not NULL and os.getpid() == self._pid:
            with nogil:
                ds_gsync_stop(self._g)

    def __dealloc__(self):
        if self._g is NULL:
            return
        # In a forked child the thread does not exist and the mutex may have
        # been copied held: leave it, free only the memory.
        if os.getpid() == self._pid:
            ds_gsync_stop(self._g)
            ds_gsync_destroy(self._g)
        free(self._g)
        self._g = NULL
