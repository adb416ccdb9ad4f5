#include "ds_decide.h"

#include <assert.h>
#include <string.h>

static int same_bytes(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static void grant(ds_record *next, const ds_claim_req *req, uint8_t origin_flag, ds_claim_out *out)
{
    next->state = DS_STATE_PENDING;
    next->flags = (uint8_t)((next->flags & DS_F_INTENT) | origin_flag);
    next->attempts += 1;
    next->until = req->now + req->lease;
    next->token = req->fresh_token;
    next->claimant = req->claimant;
    next->claimant_len = req->claimant_len;
    out->write = DS_WRITE_PUT;
    out->token = req->fresh_token;
}

static ds_status origin_status(const ds_record *r)
{
    if (r->flags & DS_F_ORIGIN_BEYOND)
        return DS_BEYOND_HORIZON;
    if (r->flags & DS_F_ORIGIN_UNKNOWN)
        return DS_UNKNOWN;
    return DS_NEW;
}

void ds_claim_decide(const ds_record *cur, const ds_claim_req *req, ds_record *next, ds_claim_out *out)
{
    assert(req->lease > 0 && req->fresh_token != 0);
    memset(out, 0, sizeof *out);
    if (cur == NULL) {
        /* No evidence. If the producer says the effect was requested before the
         * frontier, its record may have been evicted: never answer NEW then. */
        int beyond = req->event_time != DS_NO_TIME && req->event_time < req->frontier;
        memset(next, 0, sizeof *next);
        next->first_seen = req->now;
        next->event_time = req->event_time;
        if (req->intent) {
            memcpy(next->intent, req->intent, 16);
            next->flags = DS_F_INTENT;
        }
        next->event_id = req->event_id;
        next->event_id_len = req->event_id_len;
        grant(next, req, beyond ? DS_F_ORIGIN_BEYOND : 0, out);
        out->status = beyond ? DS_BEYOND_HORIZON : DS_NEW;
        return;
    }

    /* A different intent under the same key is a conflict whatever the state,
     * and it changes nothing: the stored record is the evidence to investigate. */
    if (req->intent && (cur->flags & DS_F_INTENT) && memcmp(req->intent, cur->intent, 16) != 0) {
        out->status = DS_CONFLICT;
        out->write = DS_WRITE_NONE;
        return;
    }

    *next = *cur;
    out->other_event = req->event_id_len && cur->event_id_len &&
                       !same_bytes(req->event_id, req->event_id_len, cur->event_id, cur->event_id_len);
    if (cur->state == DS_STATE_COMPLETED) {
        out->status = DS_DUPLICATE;
        out->token = cur->token;
    } else if (cur->until > req->now) {
        if (req->claimant_len && same_bytes(req->claimant, req->claimant_len, cur->claimant, cur->claimant_len)) {
            /* The holder retrying after a lost reply gets its own lease back. */
            out->status = origin_status(cur);
            out->token = cur->token;
        } else {
            out->status = DS_IN_PROGRESS;
            out->retry_after = cur->until - req->now;
        }
    } else {
        /* The lease ran out without complete/release: the effect may or may not
         * have happened. Hand a fenced lease to whoever reconciles it. */
        grant(next, req, DS_F_ORIGIN_UNKNOWN, out);
        out->status = DS_UNKNOWN;
    }
    if (out->other_event) {
        /* A producer publishing one effect twice is evidence worth keeping. */
        next->other_events = cur->other_events + 1;
        out->write = DS_WRITE_PUT;
    }
}

static int holds(const ds_record *cur, uint64_t token)
{
    return cur != NULL && cur->state == DS_STATE_PENDING && cur->token == token;
}

int ds_complete_decide(const ds_record *cur, uint64_t token, const uint8_t *outcome, uint32_t outcome_len,
                       int64_t now, ds_record *next)
{
    if (cur != NULL && cur->state == DS_STATE_COMPLETED && cur->token == token)
        return same_bytes(cur->outcome, cur->outcome_len, outcome, outcome_len) ? DS_OP_NOOP
                                                                                 : DS_OP_OUTCOME_DIFFERS;
    /* An expired lease still completes while nobody else was granted one:
     * the token is the fence, not the clock. */
    if (!holds(cur, token))
        return DS_OP_LEASE_LOST;
    *next = *cur;
    next->state = DS_STATE_COMPLETED;
    next->flags &= DS_F_INTENT;
    next->until = now;
    next->outcome = outcome;
    next->outcome_len = outcome_len;
    return DS_OP_APPLY;
}

int ds_release_decide(const ds_record *cur, uint64_t token)
{
    return holds(cur, token) ? DS_OP_APPLY : DS_OP_LEASE_LOST;
}

int ds_renew_decide(const ds_record *cur, uint64_t token, int64_t now, int64_t lease, ds_record *next)
{
    if (!holds(cur, token))
        return DS_OP_LEASE_LOST;
    *next = *cur;
    next->until = now + lease;
    return DS_OP_APPLY;
}

uint64_t ds_next_token(uint64_t *state)
{
    for (;;) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        z &= 0x7fffffffffffffffULL;
        if (z != 0)
            return z;
    }
}
