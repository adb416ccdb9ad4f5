/* A blocked (cache-line) Bloom filter: the negative prefilter of sealed generations.
 *
 * Each sealed generation of records (an immutable set of keys) gets one filter,
 * built once by scanning its keys, written to a file and loaded at open. A claim
 * for an absent key skips every generation whose filter answers "definitely not
 * here"; a "maybe" is always confirmed in LMDB, so no verdict rests on the filter.
 * Insert-only: there is no delete (a sealed generation never gains or loses keys
 * except by eviction of the whole generation, which drops its filter too).
 *
 * Layout
 * ------
 * The bit array is nblocks blocks of 64 bytes (512 bits, one cache line, held as
 * eight uint64_t words, 64-byte aligned). Each key touches exactly one block, so an
 * add or a query costs one cache miss whatever k is.
 *
 * Hashing (fixed by format version 1: changing any of it needs a new version)
 * ------------------------------------------------------------------------------
 * The caller supplies one 64-bit hash per key (dedupstore passes the keyed
 * ds_siphash64 of the key under the store's secret). The filter first remixes it
 * with the MurmurHash3 64-bit finaliser (fmix64, a bijection), so a caller hash
 * with structure in some bits (for example the very value used for partition
 * routing, whose high bits are then the same for every key of one partition, or
 * plain counters in a test) still spreads over every block. From x = fmix64(h):
 *
 *   block  = ((x >> 32) * nblocks) >> 32       multiply-shift of the high half
 *   p0     = (uint32_t)x                       the low half, independent of block
 *   bit i  = p_i >> 23   (9 bits: word p_i >> 29, bit (p_i >> 23) & 63)
 *   p_i+1  = p_i * 0x9e3779b9 (mod 2^32)       golden-ratio multiplicative remix
 *
 * The in-block probe sequence is the one RocksDB's FastLocalBloom uses; its k
 * positions are not forced distinct (a repeat wastes a probe, as in the model
 * below). Because the block index takes the high 32 bits, nblocks is at most
 * 2^32 - 1 (256 GiB of filter).
 *
 * Sizing
 * ------
 * A blocked filter needs more bits per key than the textbook one for the same
 * false-positive rate, because keys do not spread evenly over blocks: some blocks
 * are overloaded. ds_bloom_params therefore does not use the textbook formulas
 * (bits/key = -ln p / ln^2 2, k = log2(1/p)); it uses the blocked-filter model of
 * Putze, Sanders and Singler ("Cache-, Hash- and Space-Efficient Bloom Filters",
 * 2007), with B = 512 bits per block:
 *
 *   FP(lambda, k) = sum_{i>=0} Poisson(lambda; i) * F(i, k)
 *   F(i, k)       = mu^k + C(k,2) mu^(k-2) Var(X)/B^2,   mu = 1 - (1 - 1/B)^(k*i)
 *   Var(X)        = B(B-1)(1 - 2/B)^(k*i) + B(1 - 1/B)^(k*i) - B^2 (1 - 1/B)^(2*k*i)
 *
 * lambda = n_keys / nblocks is the mean number of keys per block (the load of a
 * block is Poisson), and F(i, k) is the rate of a 512-bit classic filter holding i
 * keys: E[(X/B)^k] for X its set bits, to second order. The textbook term mu^k
 * alone is E[X/B]^k, which undershoots (Jensen) by about 1% relative at fp 1% and
 * 2% at 0.1%; the variance term removes that. ds_bloom_params finds the largest
 * lambda for which min over k of FP(lambda, k) <= fp_rate (bisection; FP rises
 * with lambda), takes the k achieving it, and sets nblocks = ceil(n_keys / lambda),
 * at least 1. So k depends on fp_rate only. The sum is evaluated without libm
 * (Poisson weights walked out from the mode, integer powers by squaring).
 *
 * Accuracy: the Poisson load slightly overstates the variance of the true
 * binomial load (conservative, noticeably so only for a handful of blocks), and
 * the dropped third-order term is below 0.1% relative at the rates we use.
 * Measured with random 64-bit hashes, 10M keys and 10M absent probes, the rate is
 * within sampling error of the model (0.998x at 1%, 0.988x at 0.1%; the tests
 * check it). Resulting sizes: fp 1% -> k = 6, 9.92 bits/key (textbook 9.59);
 * 0.1% -> k = 9, 15.5 bits/key (textbook 14.4); 0.01% -> k = 12, 22.0 bits/key.
 *
 * Serialised form (all integers little-endian), version 1
 * -------------------------------------------------------
 *   offset  size  field
 *        0     4  magic "DSBF"
 *        4     2  version = 1
 *        6     1  k, 1..DS_BLOOM_MAX_K
 *        7     1  reserved, 0
 *        8     8  nblocks, 1..DS_BLOOM_MAX_BLOCKS
 *       16     8  nkeys: ds_bloom_add calls made (duplicates counted)
 *       24     8  tag: caller-defined, e.g. a fingerprint of the hash secret, so a
 *                 filter built under another store's secret is refused by the caller
 *       32  64*nblocks  the bit array, block by block, each block as eight
 *                 little-endian 64-bit words (bit j of a block is bit j%64 of word j/64)
 *   32+64*nblocks  8  checksum: ds_siphash64 of every preceding byte, under the fixed
 *                 16-byte key "dedupstore-bloom" (k0 = LE64 "dedupsto", k1 = LE64
 *                 "re-bloom"): a corruption check, not an authenticator.
 *
 * ds_bloom_read treats its input as untrusted: every field is validated before it
 * is used, and each kind of refusal has its own code (ds_bloom_strerror names it).
 */
#ifndef DS_BLOOM_H
#define DS_BLOOM_H

#include <stddef.h>
#include <stdint.h>

#define DS_BLOOM_VERSION 1
#define DS_BLOOM_BLOCK_BYTES 64
#define DS_BLOOM_BLOCK_BITS 512
#define DS_BLOOM_MAX_K 32
#define DS_BLOOM_MAX_BLOCKS UINT64_C(0xFFFFFFFF)
#define DS_BLOOM_HEADER_BYTES 32
#define DS_BLOOM_TRAILER_BYTES 8

enum {
    DS_BLOOM_OK = 0,
    DS_BLOOM_EINVAL = -1,    /* fp_rate not in (0, 1), k or nblocks out of range */
    DS_BLOOM_ETOOBIG = -2,   /* the filter would exceed DS_BLOOM_MAX_BLOCKS or size_t */
    DS_BLOOM_ENOMEM = -3,    /* allocation failed */
    DS_BLOOM_ESHORT = -4,    /* buffer shorter than the header, or than the header says */
    DS_BLOOM_EMAGIC = -5,    /* not a filter: the magic is not "DSBF" */
    DS_BLOOM_EVERSION = -6,  /* a format version this build does not read */
    DS_BLOOM_EHEADER = -7,   /* k, nblocks or the reserved byte out of range */
    DS_BLOOM_ELENGTH = -8,   /* buffer longer than the header says (trailing bytes) */
    DS_BLOOM_ECHECKSUM = -9, /* the checksum does not match: corrupt */
};

typedef struct {
    uint64_t *bits;   /* nblocks * 8 words, 64-byte aligned; NULL when empty */
    uint64_t nblocks; /* 1..DS_BLOOM_MAX_BLOCKS once initialised */
    uint64_t nkeys;   /* ds_bloom_add calls so far */
    uint64_t tag;     /* caller-defined, written and read back verbatim */
    unsigned k;       /* probes per key, 1..DS_BLOOM_MAX_K */
} ds_bloom;

/* Size a filter for n_keys keys at a false-positive rate fp_rate in (0, 1).
 * On success sets *nblocks (>= 1) and *k. Returns DS_BLOOM_EINVAL for an
 * fp_rate outside (0, 1) (or NaN), DS_BLOOM_ETOOBIG if the filter would need
 * more than DS_BLOOM_MAX_BLOCKS blocks. */
int ds_bloom_params(uint64_t n_keys, double fp_rate, uint64_t *nblocks, unsigned *k);

/* ds_bloom_params in its two steps. The first, the search, depends on
 * fp_rate alone and costs a few hundred microseconds, so a caller that makes
 * many filters at one rate keeps its answer: the largest mean load
 * (*keys_per_block) that meets fp_rate, and its *k (codes as above). The
 * second is arithmetic: the blocks n_keys keys need at that load
 * (DS_BLOOM_EINVAL for a load that is not > 0, DS_BLOOM_ETOOBIG as above). */
int ds_bloom_load(double fp_rate, double *keys_per_block, unsigned *k);
int ds_bloom_blocks(uint64_t n_keys, double keys_per_block, uint64_t *nblocks);

/* The model's false-positive rate for a mean of keys_per_block keys per block
 * and k probes (see "Sizing"); 0 for keys_per_block <= 0, 1 for k == 0. */
double ds_bloom_fp_model(double keys_per_block, unsigned k);

/* Allocate an empty (zeroed) filter. On failure b is left empty (bits NULL)
 * and the code says why: DS_BLOOM_EINVAL, DS_BLOOM_ETOOBIG or DS_BLOOM_ENOMEM. */
int ds_bloom_init(ds_bloom *b, uint64_t nblocks, unsigned k);

/* Release the bit array; b becomes empty. Safe on an empty filter. */
void ds_bloom_free(ds_bloom *b);

/* Bytes of the bit array. */
size_t ds_bloom_nbytes(const ds_bloom *b);

/* Insert one key hash. b must be initialised (ds_bloom_init or ds_bloom_read). */
void ds_bloom_add(ds_bloom *b, uint64_t h);

/* 0: the key was certainly never added; 1: it may have been. b must be initialised. */
int ds_bloom_maybe(const ds_bloom *b, uint64_t h);

/* Bulk forms (they prefetch blocks a few keys ahead). out[i] = ds_bloom_maybe(b, h[i]);
 * ds_bloom_maybe_many returns the number of maybes. */
void ds_bloom_add_many(ds_bloom *b, const uint64_t *h, size_t n);
size_t ds_bloom_maybe_many(const ds_bloom *b, const uint64_t *h, size_t n, uint8_t *out);

/* Bytes ds_bloom_write writes: header + bit array + checksum. */
size_t ds_bloom_serialized_size(const ds_bloom *b);

/* Serialise b into out (at least ds_bloom_serialized_size(b) bytes); returns the
 * bytes written. */
size_t ds_bloom_write(const ds_bloom *b, uint8_t *out);

/* Parse and verify a serialised filter into b (which is overwritten, not freed:
 * pass an empty or freed one). On success b owns a fresh aligned copy of the bit
 * array. On failure b is left empty and the code names the refusal. */
int ds_bloom_read(ds_bloom *b, const uint8_t *buf, size_t len);

/* A short, static description of a DS_BLOOM_* code. */
const char *ds_bloom_strerror(int code);

/* ------------------------------------------------------------------------ */
/* Hashing (see "Hashing" above), inline here for the probe below.           */

/* fmix64: the remix every key hash goes through first. */
static inline uint64_t ds_bloom_remix(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

/* The block of remixed hash x: multiply-shift of its high half. */
static inline uint64_t *ds_bloom_block(uint64_t *bits, uint64_t nblocks, uint64_t x)
{
    /* (x >> 32) < 2^32 and nblocks < 2^32: the product cannot overflow. */
    return bits + (DS_BLOOM_BLOCK_BYTES / 8) * (((x >> 32) * nblocks) >> 32);
}

/* The next probe state: multiplication mod 2^32, done in 64 bits so no
 * integer promotion can make it a signed (undefined) overflow. */
static inline uint32_t ds_bloom_next_probe(uint32_t p)
{
    return (uint32_t)((uint64_t)p * UINT64_C(0x9e3779b9));
}

/* ------------------------------------------------------------------------ */
/* One key hash against many filters.                                        */

/* A claim tests one key against every live and sealed filter of its
 * namespace (a dozen and more, all of one or two k). ds_bloom_maybe would
 * remix the hash and walk its k in-block positions again for each; a probe
 * remixes it once and makes its positions once per k, as a mask of the
 * block's 512 bits, so that each filter's test is its block's eight words
 * against that mask: (block & mask) == mask exactly when every one of the k
 * bits is set, which is ds_bloom_maybe's answer (a position repeated among
 * the k sets the same bit). */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DS_BLOOM_NO_VECTORS)
/* Two words at a time (SSE2 on x86-64, NEON on arm64): a block and a mask
 * are 64-byte and 16-byte aligned, and GCC's vector types alias their
 * element type. DS_BLOOM_NO_VECTORS: the plain loop (the C tests run both). */
#define DS_BLOOM_VECTORS 1
typedef uint64_t ds_bloom_v2 __attribute__((vector_size(16)));
#define DS_BLOOM_ALIGNED16 __attribute__((aligned(16)))
#else
#define DS_BLOOM_ALIGNED16
#endif

typedef struct {
    uint64_t x;                                 /* ds_bloom_remix of the key hash */
    unsigned k;                                 /* the probes in mask; 0: none made yet */
    uint64_t mask[DS_BLOOM_BLOCK_BYTES / 8] DS_BLOOM_ALIGNED16;
} ds_bloom_probe;

static inline void ds_bloom_probe_init(ds_bloom_probe *q, uint64_t h)
{
    q->x = ds_bloom_remix(h);
    q->k = 0;
}

/* Fetch the block ds_bloom_probe_maybe(b, q) reads (none for an empty
 * filter) with a load of its first word, whose value nothing waits for: a
 * key tested against several filters fetches each first, so that their
 * cache misses overlap instead of following one another, and its tests
 * later find the blocks in cache. A load, not a prefetch instruction: on
 * the 2-vCPU KVM guests the store is measured on (AMD EPYC), the blocks a
 * claim had prefetched some microseconds before were still missing when it
 * tested them (perf: four fifths of the probing function's samples on the
 * block's first load, a fifth of a claim's; the same with the filters in
 * huge pages, and the VM has no PMU to say why). With loads, the tests'
 * samples went (docs/benchmarks.md, thirty-sixth session). */
static inline void ds_bloom_probe_fetch(const ds_bloom *b, const ds_bloom_probe *q)
{
    if (b->nblocks)
        (void)*(volatile const uint64_t *)ds_bloom_block(b->bits, b->nblocks, q->x);
}

/* ds_bloom_maybe(b, h) for the h q was made from. b must be initialised. */
static inline int ds_bloom_probe_maybe(const ds_bloom *b, ds_bloom_probe *q)
{
    const uint64_t *blk;
    uint64_t missing = 0;
    unsigned i;
    if (q->k != b->k) {
        uint32_t p = (uint32_t)q->x;
        for (i = 0; i < DS_BLOOM_BLOCK_BYTES / 8; i++)
            q->mask[i] = 0;
        for (i = 0; i < b->k; i++) {
            q->mask[p >> 29] |= UINT64_C(1) << ((p >> 23) & 63);
            p = ds_bloom_next_probe(p);
        }
        q->k = b->k;
    }
    blk = ds_bloom_block(b->bits, b->nblocks, q->x);
#ifdef DS_BLOOM_VECTORS
    {
        const ds_bloom_v2 *m = (const ds_bloom_v2 *)q->mask, *v = (const ds_bloom_v2 *)blk;
        ds_bloom_v2 w = (m[0] & ~v[0]) | (m[1] & ~v[1]) | (m[2] & ~v[2]) | (m[3] & ~v[3]);
        missing = w[0] | w[1];
    }
#else
    for (i = 0; i < DS_BLOOM_BLOCK_BYTES / 8; i++)
        missing |= q->mask[i] & ~blk[i];
#endif
    return missing == 0;
}

#endif
