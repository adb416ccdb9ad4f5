#include "ds_bloom.h"

#include "ds_bytes.h"

#include "ds_hash.h"

#include <stdlib.h>
#include <string.h>

#define WORDS_PER_BLOCK (DS_BLOOM_BLOCK_BYTES / 8)

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH_R(p) ((void)(p))
#define PREFETCH_W(p) ((void)(p))
#endif

/* How far ahead the bulk loops prefetch; enough to cover a DRAM miss at a few ns per key. */
#define PREFETCH_AHEAD 8

/* ------------------------------------------------------------------------ */
/* A key's probes in its block (the remix, the block and the probe sequence */
/* are ds_bloom.h's: ds_bloom_remix, ds_bloom_block, ds_bloom_next_probe).   */

static inline void add_x(uint64_t *blk, unsigned k, uint32_t p)
{
    for (unsigned i = 0; i < k; i++) {
        blk[p >> 29] |= UINT64_C(1) << ((p >> 23) & 63);
        p = ds_bloom_next_probe(p);
    }
}

/* Branch-free over the probes: k is fixed per filter, so the loop branch is
 * predicted, and an absent key costs no mispredicted early exit. */
static inline int maybe_x(const uint64_t *blk, unsigned k, uint32_t p)
{
    uint64_t acc = 1;
    for (unsigned i = 0; i < k; i++) {
        acc &= blk[p >> 29] >> ((p >> 23) & 63);
        p = ds_bloom_next_probe(p);
    }
    return (int)(acc & 1);
}

void ds_bloom_add(ds_bloom *b, uint64_t h)
{
    uint64_t x = ds_bloom_remix(h);
    add_x(ds_bloom_block(b->bits, b->nblocks, x), b->k, (uint32_t)x);
    b->nkeys++;
}

int ds_bloom_maybe(const ds_bloom *b, uint64_t h)
{
    uint64_t x = ds_bloom_remix(h);
    return maybe_x(ds_bloom_block(b->bits, b->nblocks, x), b->k, (uint32_t)x);
}

void ds_bloom_add_many(ds_bloom *b, const uint64_t *h, size_t n)
{
    uint64_t ahead[PREFETCH_AHEAD];
    size_t i;
    /* A ring of remixed hashes whose blocks have been prefetched. */
    for (i = 0; i < n && i < PREFETCH_AHEAD; i++) {
        ahead[i] = ds_bloom_remix(h[i]);
        PREFETCH_W(ds_bloom_block(b->bits, b->nblocks, ahead[i]));
    }
    for (i = 0; i < n; i++) {
        uint64_t x = ahead[i % PREFETCH_AHEAD];
        if (i + PREFETCH_AHEAD < n) {
            uint64_t y = ds_bloom_remix(h[i + PREFETCH_AHEAD]);
            ahead[i % PREFETCH_AHEAD] = y;
            PREFETCH_W(ds_bloom_block(b->bits, b->nblocks, y));
        }
        add_x(ds_bloom_block(b->bits, b->nblocks, x), b->k, (uint32_t)x);
    }
    b->nkeys += n;
}

size_t ds_bloom_maybe_many(const ds_bloom *b, const uint64_t *h, size_t n, uint8_t *out)
{
    uint64_t ahead[PREFETCH_AHEAD];
    size_t i, hits = 0;
    for (i = 0; i < n && i < PREFETCH_AHEAD; i++) {
        ahead[i] = ds_bloom_remix(h[i]);
        PREFETCH_R(ds_bloom_block(b->bits, b->nblocks, ahead[i]));
    }
    for (i = 0; i < n; i++) {
        uint64_t x = ahead[i % PREFETCH_AHEAD];
        int m;
        if (i + PREFETCH_AHEAD < n) {
            uint64_t y = ds_bloom_remix(h[i + PREFETCH_AHEAD]);
            ahead[i % PREFETCH_AHEAD] = y;
            PREFETCH_R(ds_bloom_block(b->bits, b->nblocks, y));
        }
        m = maybe_x(ds_bloom_block(b->bits, b->nblocks, x), b->k, (uint32_t)x);
        if (out)
            out[i] = (uint8_t)m;
        hits += (size_t)m;
    }
    return hits;
}

/* ------------------------------------------------------------------------ */
/* Sizing: the blocked-filter false-positive model, without libm.           */

/* x^n for n >= 0, by squaring. */
static double ipow(double x, uint64_t n)
{
    double r = 1.0;
    while (n) {
        if (n & 1)
            r *= x;
        x *= x;
        n >>= 1;
    }
    return r;
}

/* Weights below this fraction of the running total end a walk: the dropped
 * Poisson tail is then far below any rate worth sizing for. */
#define TAIL_CUTOFF 1e-27

/* Beyond this mean load every block is saturated for every k we allow:
 * (1 - 1/512)^(32 * i) underflows to 0 long before i gets near it. */
#define LAMBDA_SATURATED 1e6

/* The false-positive rate of one 512-bit block after t = k*i probes, given
 * qt = (1 - 1/B)^t and rt = (1 - 2/B)^t. With X the number of set bits, the rate
 * is E[(X/B)^k]; the classic (1 - qt)^k is E[X/B]^k, which by Jensen falls short.
 * We add the second-order (delta-method) term, C(k,2) mu^(k-2) Var(X/B), with the
 * exact occupancy variance Var(X) = B(B-1) rt + B qt - B^2 qt^2. That term is what
 * brings the model onto the measured rates (about +1% relative at fp 1% and +2%
 * at 0.1%, which the classic formula misses). Exact for k = 1. */
static double block_fp(double qt, double rt, unsigned k)
{
    const double B = DS_BLOOM_BLOCK_BITS;
    double mu = 1.0 - qt;
    double var = (B * (B - 1.0) * rt + B * qt - B * B * qt * qt) / (B * B);
    double f;

    if (k < 2)
        return mu;
    if (var < 0.0) /* rounding, when the block is (nearly) empty or full */
        var = 0.0;
    f = ipow(mu, k) + 0.5 * (double)k * (double)(k - 1) * ipow(mu, k - 2) * var;
    return f < 1.0 ? f : 1.0;
}

double ds_bloom_fp_model(double lam, unsigned k)
{
    double q, r, w, qi, ri, qm, rm, total = 0.0, acc = 0.0;
    uint64_t m, i;

    if (k == 0)
        return 1.0; /* no probe can say "absent" */
    if (lam != lam)
        return lam; /* NaN in, NaN out */
    if (lam <= 0.0)
        return 0.0;
    if (lam >= LAMBDA_SATURATED)
        return 1.0;

    /* Per key: q = (1 - 1/B)^k and r = (1 - 2/B)^k, so a block holding i keys
     * has qt = q^i and rt = r^i. */
    q = ipow(1.0 - 1.0 / DS_BLOOM_BLOCK_BITS, k);
    r = ipow(1.0 - 2.0 / DS_BLOOM_BLOCK_BITS, k);
    /* Poisson weights relative to the mode m (no exp(-lam) needed: the sum of
     * the weights normalises), walked up and then down until negligible. */
    m = (uint64_t)lam;
    qm = ipow(q, m);
    rm = ipow(r, m);
    w = 1.0;
    qi = qm;
    ri = rm;
    for (i = m;; i++) {
        total += w;
        acc += w * block_fp(qi, ri, k);
        w *= lam / (double)(i + 1);
        qi *= q;
        ri *= r;
        if (w < TAIL_CUTOFF * total)
            break;
    }
    w = 1.0;
    qi = qm;
    ri = rm;
    for (i = m; i > 0; i--) {
        w *= (double)i / lam;
        qi /= q;
        ri /= r;
        total += w;
        acc += w * block_fp(qi, ri, k);
        if (w < TAIL_CUTOFF * total)
            break;
    }
    return acc / total;
}

/* The largest mean load searched: 0.25 bits per key. A rate so loose that even
 * this load meets it gets this load (the filter is then better than asked). */
#define LAMBDA_MAX 2048.0
#define BISECT_STEPS 48

int ds_bloom_load(double fp_rate, double *keys_per_block, unsigned *k)
{
    double best_lam = 0.0;
    unsigned best_k = 0, kk;

    if (!(fp_rate > 0.0 && fp_rate < 1.0)) /* also refuses NaN */
        return DS_BLOOM_EINVAL;
    for (kk = 1; kk <= DS_BLOOM_MAX_K; kk++) {
        double lo = 0.0, hi = LAMBDA_MAX;
        if (ds_bloom_fp_model(hi, kk) <= fp_rate) {
            lo = hi;
        } else {
            /* Invariant: model(lo) <= fp_rate < model(hi); the model increases with lam. */
            for (int s = 0; s < BISECT_STEPS; s++) {
                double mid = 0.5 * (lo + hi);
                if (ds_bloom_fp_model(mid, kk) <= fp_rate)
                    lo = mid;
                else
                    hi = mid;
            }
        }
        if (lo > best_lam) {
            best_lam = lo;
            best_k = kk;
        } else if (kk >= best_k + 2) {
            break; /* past the optimum: the best load is unimodal in k */
        }
    }
    if (best_k == 0) /* fp_rate so small no load meets it (below ~1e-300) */
        return DS_BLOOM_ETOOBIG;
    *keys_per_block = best_lam;
    *k = best_k;
    return DS_BLOOM_OK;
}

int ds_bloom_blocks(uint64_t n_keys, double keys_per_block, uint64_t *nblocks)
{
    double blocks;
    uint64_t nb;

    if (!(keys_per_block > 0.0)) /* also refuses NaN */
        return DS_BLOOM_EINVAL;
    blocks = (double)n_keys / keys_per_block;
    if (!(blocks < (double)DS_BLOOM_MAX_BLOCKS))
        return DS_BLOOM_ETOOBIG;
    nb = (uint64_t)blocks; /* floor; then round up */
    if ((double)nb < blocks)
        nb++;
    if (nb == 0)
        nb = 1;
    if (nb > DS_BLOOM_MAX_BLOCKS)
        return DS_BLOOM_ETOOBIG;
    *nblocks = nb;
    return DS_BLOOM_OK;
}

int ds_bloom_params(uint64_t n_keys, double fp_rate, uint64_t *nblocks, unsigned *k)
{
    double lam;
    unsigned kk;
    int rc = ds_bloom_load(fp_rate, &lam, &kk);

    if (rc == DS_BLOOM_OK)
        rc = ds_bloom_blocks(n_keys, lam, nblocks);
    if (rc == DS_BLOOM_OK)
        *k = kk;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */

static int too_big(uint64_t nblocks)
{
    return nblocks > DS_BLOOM_MAX_BLOCKS ||
           nblocks > (SIZE_MAX - DS_BLOOM_HEADER_BYTES - DS_BLOOM_TRAILER_BYTES) / DS_BLOOM_BLOCK_BYTES;
}

static void make_empty(ds_bloom *b)
{
    b->bits = NULL;
    b->nblocks = 0;
    b->nkeys = 0;
    b->tag = 0;
    b->k = 0;
}

int ds_bloom_init(ds_bloom *b, uint64_t nblocks, unsigned k)
{
    size_t bytes;
    void *mem;

    make_empty(b);
    if (k < 1 || k > DS_BLOOM_MAX_K || nblocks < 1)
        return DS_BLOOM_EINVAL;
    if (too_big(nblocks))
        return DS_BLOOM_ETOOBIG;
    /* C11 aligned_alloc wants a size that is a multiple of the alignment: it is. */
    bytes = (size_t)nblocks * DS_BLOOM_BLOCK_BYTES;
    mem = aligned_alloc(DS_BLOOM_BLOCK_BYTES, bytes);
    if (mem == NULL)
        return DS_BLOOM_ENOMEM;
    memset(mem, 0, bytes);
    b->bits = (uint64_t *)mem;
    b->nblocks = nblocks;
    b->k = k;
    return DS_BLOOM_OK;
}

void ds_bloom_free(ds_bloom *b)
{
    free(b->bits);
    make_empty(b);
}

size_t ds_bloom_nbytes(const ds_bloom *b)
{
    return (size_t)b->nblocks * DS_BLOOM_BLOCK_BYTES;
}

/* ------------------------------------------------------------------------ */
/* Serialisation                                                            */

static const uint8_t MAGIC[4] = {'D', 'S', 'B', 'F'};

static uint64_t checksum(const uint8_t *data, size_t len)
{
    ds_hash_key key;
    ds_hash_key_init(&key, (const uint8_t *)"dedupstore-bloom");
    return ds_siphash64(&key, data, len);
}

size_t ds_bloom_serialized_size(const ds_bloom *b)
{
    return DS_BLOOM_HEADER_BYTES + ds_bloom_nbytes(b) + DS_BLOOM_TRAILER_BYTES;
}

size_t ds_bloom_write(const ds_bloom *b, uint8_t *out)
{
    size_t words = (size_t)b->nblocks * WORDS_PER_BLOCK;
    uint8_t *p = out + DS_BLOOM_HEADER_BYTES;

    memcpy(out, MAGIC, 4);
    out[4] = (uint8_t)(DS_BLOOM_VERSION & 0xff);
    out[5] = (uint8_t)(DS_BLOOM_VERSION >> 8);
    out[6] = (uint8_t)b->k;
    out[7] = 0;
    ds_store_le64(out + 8, b->nblocks);
    ds_store_le64(out + 16, b->nkeys);
    ds_store_le64(out + 24, b->tag);
    for (size_t i = 0; i < words; i++, p += 8)
        ds_store_le64(p, b->bits[i]);
    ds_store_le64(p, checksum(out, (size_t)(p - out)));
    return (size_t)(p - out) + DS_BLOOM_TRAILER_BYTES;
}

int ds_bloom_read(ds_bloom *b, const uint8_t *buf, size_t len)
{
    uint64_t nblocks;
    unsigned k;
    size_t expected, words;
    int rc;

    make_empty(b);
    /* Most specific refusal first: a foreign file shorter than our header is
     * still "not a filter" if its first bytes say so. */
    if (buf == NULL || len < 4)
        return DS_BLOOM_ESHORT;
    if (memcmp(buf, MAGIC, 4) != 0)
        return DS_BLOOM_EMAGIC;
    if (len < 6)
        return DS_BLOOM_ESHORT;
    if ((unsigned)buf[4] + ((unsigned)buf[5] << 8) != DS_BLOOM_VERSION)
        return DS_BLOOM_EVERSION;
    if (len < DS_BLOOM_HEADER_BYTES + DS_BLOOM_TRAILER_BYTES)
        return DS_BLOOM_ESHORT;
    k = buf[6];
    nblocks = ds_load_le64(buf + 8);
    if (k < 1 || k > DS_BLOOM_MAX_K || buf[7] != 0 || nblocks < 1 || nblocks > DS_BLOOM_MAX_BLOCKS)
        return DS_BLOOM_EHEADER;
    if (too_big(nblocks)) /* only where size_t is narrower than 64 bits */
        return DS_BLOOM_ETOOBIG;
    expected = DS_BLOOM_HEADER_BYTES + (size_t)nblocks * DS_BLOOM_BLOCK_BYTES + DS_BLOOM_TRAILER_BYTES;
    if (len < expected)
        return DS_BLOOM_ESHORT;
    if (len > expected)
        return DS_BLOOM_ELENGTH;
    if (checksum(buf, expected - DS_BLOOM_TRAILER_BYTES) != ds_load_le64(buf + expected - DS_BLOOM_TRAILER_BYTES))
        return DS_BLOOM_ECHECKSUM;
    rc = ds_bloom_init(b, nblocks, k);
    if (rc != DS_BLOOM_OK)
        return rc;
    words = (size_t)nblocks * WORDS_PER_BLOCK;
    for (size_t i = 0; i < words; i++)
        b->bits[i] = ds_load_le64(buf + DS_BLOOM_HEADER_BYTES + 8 * i);
    b->nkeys = ds_load_le64(buf + 16);
    b->tag = ds_load_le64(buf + 24);
    return DS_BLOOM_OK;
}

const char *ds_bloom_strerror(int code)
{
    switch (code) {
    case DS_BLOOM_OK: return "ok";
    case DS_BLOOM_EINVAL: return "invalid parameters (fp_rate must be in (0, 1), k in 1..32, nblocks >= 1)";
    case DS_BLOOM_ETOOBIG: return "the filter would be too large";
    case DS_BLOOM_ENOMEM: return "out of memory allocating the bit array";
    case DS_BLOOM_ESHORT: return "truncated: shorter than its header or than its header says";
    case DS_BLOOM_EMAGIC: return "not a Bloom filter file (bad magic; expected \"DSBF\")";
    case DS_BLOOM_EVERSION: return "unsupported Bloom filter format version (this build reads version 1)";
    case DS_BLOOM_EHEADER: return "corrupt header: k, block count or reserved byte out of range";
    case DS_BLOOM_ELENGTH: return "length mismatch: longer than its header says";
    case DS_BLOOM_ECHECKSUM: return "corrupt: checksum mismatch";
    default: return "unknown Bloom filter error";
    }
}
