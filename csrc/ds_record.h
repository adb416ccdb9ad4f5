/* The record stored for one (namespace, key): its on-disk form (docs/format.md,
 * "Record") and the bounds-checked codec for it.
 *
 * Bytes read from disk are treated as untrusted: ds_record_decode validates
 * every length against the buffer before pointing into it.
 */
#ifndef DS_RECORD_H
#define DS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define DS_RECORD_VERSION 1
#define DS_RECORD_HEADER 68
#define DS_NO_TIME INT64_MIN

enum { DS_STATE_PENDING = 1, DS_STATE_COMPLETED = 2 };

/* flags */
#define DS_F_INTENT 0x01         /* intent holds a digest (else: no intent check) */
#define DS_F_ORIGIN_UNKNOWN 0x02 /* the current lease was granted as UNKNOWN */
#define DS_F_ORIGIN_BEYOND 0x04  /* the current lease was granted as BEYOND_HORIZON */
#define DS_F_KNOWN 0x07          /* every flag this version defines */

typedef struct {
    uint8_t state;
    uint8_t flags;
    uint32_t attempts;     /* leases granted so far */
    int64_t first_seen;    /* microseconds since the epoch, store clock */
    int64_t until;         /* PENDING: lease expiry; COMPLETED: completion time */
    uint64_t token;        /* the current (or completing) lease token */
    uint8_t intent[16];    /* keyed SipHash-128 of the canonical intent */
    int64_t event_time;    /* producer's event time, or DS_NO_TIME */
    uint32_t other_events; /* repeats that carried a different event_id */
    const uint8_t *claimant;
    uint32_t claimant_len;
    const uint8_t *event_id;
    uint32_t event_id_len;
    const uint8_t *outcome;
    uint32_t outcome_len;
} ds_record;

enum { DS_REC_OK = 0, DS_REC_SHORT = -1, DS_REC_VERSION = -2, DS_REC_CORRUPT = -3 };

/* Bytes ds_record_encode will write. */
size_t ds_record_size(const ds_record *r);
/* Write r into out (at least ds_record_size(r) bytes); returns bytes written. */
size_t ds_record_encode(const ds_record *r, uint8_t *out);
/* Parse buf into r; r's pointers alias buf. Returns a DS_REC_* code. */
int ds_record_decode(const uint8_t *buf, size_t len, ds_record *r);

#endif
