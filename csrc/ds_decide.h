/* Where a claim is decided: the verdict table of SPEC section 3 as pure
 * functions from (stored record, request, now) to (verdict, record to write).
 *
 * Nothing here touches storage; the caller looks the record up, calls one of
 * these inside its write transaction, and writes `next` when told to. Keeping
 * the table pure is what lets the C unit tests and the Python state machine
 * check every row of it.
 */
#ifndef DS_DECIDE_H
#define DS_DECIDE_H

#include "ds_record.h"

typedef enum {
    DS_NEW = 1,
    DS_DUPLICATE = 2,
    DS_CONFLICT = 3,
    DS_IN_PROGRESS = 4,
    DS_UNKNOWN = 5,
    DS_BEYOND_HORIZON = 6,
} ds_status;

/* What ds_claim_decide asks the caller to do with storage. */
typedef enum {
    DS_WRITE_NONE = 0, /* answer from the stored record; change nothing */
    DS_WRITE_PUT = 1,  /* store `next` */
} ds_write;

typedef struct {
    int64_t now;        /* microseconds, store clock */
    int64_t lease;      /* lease length in microseconds */
    int64_t event_time; /* or DS_NO_TIME */
    int64_t frontier;   /* eviction frontier of the key's namespace and partition */
    const uint8_t *intent; /* 16-byte digest, or NULL for "no intent check" */
    const uint8_t *claimant;
    uint32_t claimant_len;
    const uint8_t *event_id;
    uint32_t event_id_len;
    uint64_t fresh_token; /* used if this claim is granted a new lease */
} ds_claim_req;

typedef struct {
    ds_status status;
    ds_write write;
    uint64_t token;      /* NEW / UNKNOWN / BEYOND_HORIZON: the lease token */
    int64_t retry_after; /* IN_PROGRESS: microseconds until the lease expires */
    int other_event;     /* the repeat carried a different event_id than the record */
} ds_claim_out;

/* cur is NULL when no record exists. next is filled when out->write says so;
 * its pointers alias cur or req. */
void ds_claim_decide(const ds_record *cur, const ds_claim_req *req, ds_record *next, ds_claim_out *out);

enum {
    DS_OP_APPLY = 0,     /* write `next` (or delete, for release) */
    DS_OP_NOOP = 1,      /* already in the requested state: succeed, change nothing */
    DS_OP_LEASE_LOST = -1,
    DS_OP_OUTCOME_DIFFERS = -2, /* completed with this token, but another outcome */
};

int ds_complete_decide(const ds_record *cur, uint64_t token, const uint8_t *outcome, uint32_t outcome_len,
                       int64_t now, ds_record *next);
int ds_release_decide(const ds_record *cur, uint64_t token);
int ds_renew_decide(const ds_record *cur, uint64_t token, int64_t now, int64_t lease, ds_record *next);

/* Token generator: splitmix64 over a per-process random state; never 0 and
 * always below 2**63 so it fits a signed 64-bit field in any client language. */
uint64_t ds_next_token(uint64_t *state);

#endif
