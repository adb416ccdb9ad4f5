#include "ds_record.h"

#include <assert.h>
#include <string.h>

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

size_t ds_record_size(const ds_record *r)
{
    return DS_RECORD_HEADER + (size_t)r->claimant_len + r->event_id_len + r->outcome_len;
}

size_t ds_record_encode(const ds_record *r, uint8_t *out)
{
    /* The binding checks these limits at the edge; a record that breaks them
     * here would be silently truncated on disk. */
    assert(r->claimant_len <= UINT16_MAX && r->event_id_len <= UINT16_MAX);
    assert(r->state == DS_STATE_PENDING || r->state == DS_STATE_COMPLETED);
    assert((r->flags & ~DS_F_KNOWN) == 0);
    out[0] = DS_RECORD_VERSION;
    out[1] = r->state;
    out[2] = r->flags;
    out[3] = 0;
    put32(out + 4, r->attempts);
    put64(out + 8, (uint64_t)r->first_seen);
    put64(out + 16, (uint64_t)r->until);
    put64(out + 24, r->token);
    memcpy(out + 32, r->intent, 16);
    put64(out + 48, (uint64_t)r->event_time);
    put32(out + 56, r->other_events);
    put16(out + 60, (uint16_t)r->claimant_len);
    put16(out + 62, (uint16_t)r->event_id_len);
    put32(out + 64, r->outcome_len);
    uint8_t *p = out + DS_RECORD_HEADER;
    if (r->claimant_len)
        memcpy(p, r->claimant, r->claimant_len);
    p += r->claimant_len;
    if (r->event_id_len)
        memcpy(p, r->event_id, r->event_id_len);
    p += r->event_id_len;
    if (r->outcome_len)
        memcpy(p, r->outcome, r->outcome_len);
    p += r->outcome_len;
    return (size_t)(p - out);
}

int ds_record_decode(const uint8_t *buf, size_t len, ds_record *r)
{
    if (len < 1)
        return DS_REC_SHORT;
    if (buf[0] != DS_RECORD_VERSION)
        return DS_REC_VERSION;
    if (len < DS_RECORD_HEADER)
        return DS_REC_SHORT;
    r->state = buf[1];
    r->flags = buf[2];
    if ((r->state != DS_STATE_PENDING && r->state != DS_STATE_COMPLETED) || (r->flags & ~DS_F_KNOWN) ||
        buf[3] != 0)
        return DS_REC_CORRUPT;
    r->attempts = get32(buf + 4);
    r->first_seen = (int64_t)get64(buf + 8);
    r->until = (int64_t)get64(buf + 16);
    r->token = get64(buf + 24);
    memcpy(r->intent, buf + 32, 16);
    r->event_time = (int64_t)get64(buf + 48);
    r->other_events = get32(buf + 56);
    r->claimant_len = get16(buf + 60);
    r->event_id_len = get16(buf + 62);
    r->outcome_len = get32(buf + 64);
    /* Sizes read from disk are untrusted: sum in 64 bits and compare exactly. */
    uint64_t want = (uint64_t)DS_RECORD_HEADER + r->claimant_len + r->event_id_len + r->outcome_len;
    if (want != len)
        return DS_REC_CORRUPT;
    r->claimant = buf + DS_RECORD_HEADER;
    r->event_id = r->claimant + r->claimant_len;
    r->outcome = r->event_id + r->event_id_len;
    return DS_REC_OK;
}
