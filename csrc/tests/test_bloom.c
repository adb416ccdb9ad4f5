/* Unit tests of the blocked Bloom filter (csrc/ds_bloom.c): sizing, no false
 * negatives, the measured false-positive rate against the configured one, the
 * bulk paths, and the serialised form with every refusal it must make.
 *
 * Built and run by tests/test_bloom.py (with ASan/UBSan where available):
 *   cc -std=c11 -Wall -Wextra -Werror -Icsrc csrc/tests/test_bloom.c csrc/ds_bloom.c csrc/ds_hash.c -lm
 * The last line printed is "N passed, M failed"; the exit status is non-zero
 * on any failure. Everything is deterministic (fixed hash key, fixed keys).
 */
#include "../ds_bloom.h"
#include "../ds_hash.h"

#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_hash_key test_key;

/* The hash dedupstore feeds the filter: keyed SipHash-64 of the key bytes. */
static uint64_t key_hash(const char *prefix, uint64_t i)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%s-%020llu", prefix, (unsigned long long)i);
    return ds_siphash64(&test_key, buf, (size_t)n);
}

/* Serialise b into an exactly sized heap buffer (so ASan sees any overread). */
static uint8_t *serialise(const ds_bloom *b, size_t *len)
{
    size_t n = ds_bloom_serialized_size(b);
    uint8_t *out = malloc(n);
    if (out == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    *len = ds_bloom_write(b, out);
    return out;
}

/* Read a copy of buf[0..len) held in an exactly sized heap block. */
static int read_copy(ds_bloom *b, const uint8_t *buf, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    int rc;
    if (copy == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    if (len)
        memcpy(copy, buf, len);
    rc = ds_bloom_read(b, copy, len);
    free(copy);
    return rc;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------------ */

static void test_params(void)
{
    uint64_t nb = 0, nb2 = 0;
    unsigned k = 0, k2 = 0;

    /* Out of (0, 1), and NaN, are refused. */
    CHECK_EQ(ds_bloom_params(1000, 0.0, &nb, &k), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_params(1000, 1.0, &nb, &k), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_params(1000, -0.01, &nb, &k), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_params(1000, 1.5, &nb, &k), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_params(1000, NAN, &nb, &k), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_params(1000, INFINITY, &nb, &k), DS_BLOOM_EINVAL);

    /* n = 0 and n = 1: one block, a valid k. */
    CHECK_EQ(ds_bloom_params(0, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(nb, 1);
    CHECK(k >= 1 && k <= DS_BLOOM_MAX_K);
    CHECK_EQ(ds_bloom_params(1, 0.01, &nb, &k2), DS_BLOOM_OK);
    CHECK_EQ(nb, 1);
    CHECK_EQ(k2, k);

    /* The figures documented in ds_bloom.h. */
    CHECK_EQ(ds_bloom_params(1000000, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(k, 6);
    CHECK(nb * 512.0 / 1e6 > 9.8 && nb * 512.0 / 1e6 < 10.0);
    CHECK_EQ(ds_bloom_params(1000000, 0.001, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(k, 9);
    CHECK(nb * 512.0 / 1e6 > 15.4 && nb * 512.0 / 1e6 < 15.7);

    /* k depends on the rate only; blocks grow with keys and with strictness. */
    CHECK_EQ(ds_bloom_params(10, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_params(10000000, 0.01, &nb2, &k2), DS_BLOOM_OK);
    CHECK_EQ(k, k2);
    CHECK(nb2 > nb);
    CHECK_EQ(ds_bloom_params(100000, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_params(100000, 0.001, &nb2, &k2), DS_BLOOM_OK);
    CHECK(nb2 > nb && k2 > k);

    /* The chosen size meets the target under the model, for a spread of rates. */
    {
        static const double rates[] = {0.5, 0.2, 0.1, 0.05, 0.01, 0.003, 0.001, 1e-4, 1e-6, 1e-9, 0.9, 0.999};
        for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
            int rc = ds_bloom_params(1000000, rates[i], &nb, &k);
            CHECK_EQ(rc, DS_BLOOM_OK);
            if (rc != DS_BLOOM_OK)
                continue;
            CHECK(k >= 1 && k <= DS_BLOOM_MAX_K);
            CHECK_AT(ds_bloom_fp_model(1e6 / (double)nb, k) <= rates[i] * (1 + 1e-9), __FILE__, __LINE__,
                     "model at %g: %g", rates[i], ds_bloom_fp_model(1e6 / (double)nb, k));
            /* ...and is not grossly oversized: one block fewer would miss it (loose rates excepted). */
            if (rates[i] < 0.9 && nb > 1)
                CHECK(ds_bloom_fp_model(1e6 / (double)(nb - 1), k) > rates[i] * 0.999);
        }
    }

    /* Too many blocks, or a rate no load can meet, is "too big", not a wrap. */
    CHECK_EQ(ds_bloom_params(UINT64_MAX, 0.01, &nb, &k), DS_BLOOM_ETOOBIG);
    CHECK_EQ(ds_bloom_params(UINT64_C(1) << 40, 0.001, &nb, &k), DS_BLOOM_ETOOBIG);
    CHECK_EQ(ds_bloom_params(1000, 1e-300, &nb, &k), DS_BLOOM_ETOOBIG);

    /* The two steps give what ds_bloom_params gives, and refuse what it refuses. */
    {
        static const double rates[] = {0.2, 0.01, 0.005, 0.001, 1e-6};
        static const uint64_t counts[] = {0, 1, 1000, 65536, 1000000};
        double load = 0.0;
        for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
            CHECK_EQ(ds_bloom_load(rates[i], &load, &k2), DS_BLOOM_OK);
            CHECK(load > 0.0);
            for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
                CHECK_EQ(ds_bloom_params(counts[j], rates[i], &nb, &k), DS_BLOOM_OK);
                CHECK_EQ(ds_bloom_blocks(counts[j], load, &nb2), DS_BLOOM_OK);
                CHECK_EQ(nb2, nb);
                CHECK_EQ(k2, k);
            }
        }
        CHECK_EQ(ds_bloom_load(0.0, &load, &k), DS_BLOOM_EINVAL);
        CHECK_EQ(ds_bloom_load(NAN, &load, &k), DS_BLOOM_EINVAL);
        CHECK_EQ(ds_bloom_load(1e-300, &load, &k), DS_BLOOM_ETOOBIG);
        CHECK_EQ(ds_bloom_blocks(1000, 0.0, &nb), DS_BLOOM_EINVAL);
        CHECK_EQ(ds_bloom_blocks(1000, NAN, &nb), DS_BLOOM_EINVAL);
        CHECK_EQ(ds_bloom_blocks(UINT64_MAX, 1.0, &nb), DS_BLOOM_ETOOBIG);
    }

    /* The model's edges. */
    CHECK(ds_bloom_fp_model(0.0, 6) == 0.0);
    CHECK(ds_bloom_fp_model(-1.0, 6) == 0.0);
    CHECK(ds_bloom_fp_model(10.0, 0) == 1.0);
    CHECK(ds_bloom_fp_model(1e7, 6) == 1.0);
    CHECK(isnan(ds_bloom_fp_model(NAN, 6)));
    CHECK(ds_bloom_fp_model(10.0, 6) < ds_bloom_fp_model(20.0, 6));
    /* k = 1 is exact: 1 - E[(1 - 1/512)^i] = 1 - exp(-lam / 512). */
    CHECK(fabs(ds_bloom_fp_model(100.0, 1) - (1.0 - exp(-100.0 / 512.0))) < 1e-12);
}

static void test_init_free(void)
{
    ds_bloom b;

    CHECK_EQ(ds_bloom_init(&b, 0, 6), DS_BLOOM_EINVAL);
    CHECK(b.bits == NULL);
    CHECK_EQ(ds_bloom_init(&b, 10, 0), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_init(&b, 10, DS_BLOOM_MAX_K + 1), DS_BLOOM_EINVAL);
    CHECK_EQ(ds_bloom_init(&b, DS_BLOOM_MAX_BLOCKS + 1, 6), DS_BLOOM_ETOOBIG);
    CHECK(b.bits == NULL);
    CHECK_EQ(ds_bloom_init(&b, UINT64_MAX, 6), DS_BLOOM_ETOOBIG);
    ds_bloom_free(&b); /* freeing an empty filter is allowed */

    CHECK_EQ(ds_bloom_init(&b, 37, 7), DS_BLOOM_OK);
    CHECK(b.bits != NULL);
    CHECK_EQ((uintptr_t)b.bits % 64, 0);
    CHECK_EQ(ds_bloom_nbytes(&b), 37 * 64);
    CHECK_EQ(b.nkeys, 0);
    CHECK_EQ(b.k, 7);
    {
        int all_zero = 1;
        for (size_t i = 0; i < 37 * 8; i++)
            all_zero &= b.bits[i] == 0;
        CHECK(all_zero);
    }
    /* An empty filter says "absent" to everything. */
    {
        int any = 0;
        for (uint64_t i = 0; i < 1000; i++)
            any |= ds_bloom_maybe(&b, key_hash("empty", i));
        CHECK(!any);
    }
    ds_bloom_free(&b);
    CHECK(b.bits == NULL);
    CHECK_EQ(b.nblocks, 0);
    /* A freed (blockless) filter may be fetched: nothing is read (ASan
     * would see a read through its NULL bits). */
    {
        ds_bloom_probe q;
        ds_bloom_probe_init(&q, key_hash("empty", 1));
        ds_bloom_probe_fetch(&b, &q);
    }
    ds_bloom_free(&b);
}

/* Bits an add sets: exactly one block touched, at most k bits in it. */
static void test_one_block(void)
{
    ds_bloom b;
    CHECK_EQ(ds_bloom_init(&b, 64, 8), DS_BLOOM_OK);
    for (uint64_t i = 0; i < 200; i++) {
        int blocks = 0, bits = 0;
        memset(b.bits, 0, ds_bloom_nbytes(&b));
        ds_bloom_add(&b, key_hash("one", i));
        for (size_t blk = 0; blk < 64; blk++) {
            int here = 0;
            for (size_t w = 0; w < 8; w++) {
                uint64_t v = b.bits[blk * 8 + w];
                while (v) {
                    here++;
                    v &= v - 1;
                }
            }
            blocks += here > 0;
            bits += here;
        }
        CHECK_EQ(blocks, 1);
        CHECK(bits >= 1 && bits <= 8);
    }
    CHECK_EQ(b.nkeys, 200);
    ds_bloom_free(&b);
}

static void test_no_false_negatives(void)
{
    const uint64_t n = 100000;
    uint64_t nb;
    unsigned k;
    ds_bloom b;
    uint64_t missing = 0;

    CHECK_EQ(ds_bloom_params(n, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_init(&b, nb, k), DS_BLOOM_OK);
    for (uint64_t i = 0; i < n; i++)
        ds_bloom_add(&b, key_hash("present", i));
    CHECK_EQ(b.nkeys, n);
    for (uint64_t i = 0; i < n; i++) {
        /* A fetch changes nothing an answer reads. */
        ds_bloom_probe q;
        ds_bloom_probe_init(&q, key_hash("present", i));
        ds_bloom_probe_fetch(&b, &q);
        missing += !ds_bloom_maybe(&b, key_hash("present", i));
    }
    CHECK_EQ(missing, 0);
    ds_bloom_free(&b);

    /* Overfilled far past its design (saturation) still never forgets. */
    CHECK_EQ(ds_bloom_init(&b, 2, 3), DS_BLOOM_OK);
    for (uint64_t i = 0; i < 5000; i++)
        ds_bloom_add(&b, key_hash("crowd", i));
    missing = 0;
    for (uint64_t i = 0; i < 5000; i++)
        missing += !ds_bloom_maybe(&b, key_hash("crowd", i));
    CHECK_EQ(missing, 0);
    ds_bloom_free(&b);
}

/* The bulk paths agree bit for bit with the per-key ones. */
static void test_bulk(void)
{
    const size_t n = 20011; /* not a multiple of the prefetch distance */
    uint64_t *h = malloc(n * sizeof *h), *q = malloc(n * sizeof *q);
    uint8_t *out = malloc(n);
    ds_bloom a, b;
    size_t hits = 0, hits_bulk;
    int agree = 1;

    if (!h || !q || !out) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) {
        h[i] = key_hash("bulk", i);
        q[i] = key_hash(i % 2 ? "bulk" : "other", i);
    }
    CHECK_EQ(ds_bloom_init(&a, 300, 6), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_init(&b, 300, 6), DS_BLOOM_OK);
    for (size_t i = 0; i < n; i++)
        ds_bloom_add(&a, h[i]);
    ds_bloom_add_many(&b, h, n);
    CHECK_EQ(a.nkeys, b.nkeys);
    CHECK_MEM(a.bits, b.bits, ds_bloom_nbytes(&a));

    hits_bulk = ds_bloom_maybe_many(&b, q, n, out);
    for (size_t i = 0; i < n; i++) {
        int m = ds_bloom_maybe(&a, q[i]);
        hits += (size_t)m;
        agree &= out[i] == m;
    }
    CHECK(agree);
    CHECK_EQ(hits, hits_bulk);
    CHECK_EQ(ds_bloom_maybe_many(&b, q, n, NULL), hits_bulk);
    /* Short batches (below the prefetch distance) and empty ones. */
    CHECK_EQ(ds_bloom_maybe_many(&b, q, 3, out), (size_t)(out[0] + out[1] + out[2]));
    CHECK_EQ(ds_bloom_maybe_many(&b, q, 0, out), 0);
    ds_bloom_add_many(&b, h, 0);
    CHECK_EQ(b.nkeys, n);

    ds_bloom_free(&a);
    ds_bloom_free(&b);
    free(h);
    free(q);
    free(out);
}

/* ds_bloom_probe: one key hash against many filters of several k, each
 * answer ds_bloom_maybe's. The filters are small and well filled so that
 * both answers come up often; one probe goes from filter to filter, its k
 * changing from one to the next, as a claim's goes from its live filters to
 * its sealed ones. */
static void test_probe(void)
{
    enum { NF = 8, NQ = 20000 };
    static const unsigned ks[NF] = {6, 7, 6, 1, 32, 9, 9, 12};
    ds_bloom f[NF], empty = {0};
    unsigned long yes = 0, no = 0;
    int agree = 1, prefix_ok = 1;

    for (int j = 0; j < NF; j++) {
        CHECK_EQ(ds_bloom_init(&f[j], 3 + (uint64_t)j, ks[j]), DS_BLOOM_OK);
        for (uint64_t i = 0; i < 60 * (3 + (uint64_t)j) / (ks[j] > 9 ? 4 : 1); i++)
            ds_bloom_add(&f[j], key_hash("probe", (uint64_t)j * 1000003u + i));
    }
    for (uint64_t i = 0; i < NQ; i++) {
        /* Half of them keys the first filter holds, half keys none holds
         * (the others, small and full, say "maybe" to many of them). */
        uint64_t h = i % 2 ? key_hash("probe", (i / 2) % 180) : key_hash("absent", i);
        ds_bloom_probe q;
        ds_bloom_probe_init(&q, h);
        ds_bloom_probe_fetch(&empty, &q); /* no block: nothing fetched */
        for (int j = 0; j < NF; j++) {
            int m = ds_bloom_maybe(&f[j], h);
            ds_bloom_probe_fetch(&f[j], &q);
            agree &= ds_bloom_probe_maybe(&f[j], &q) == m;
            agree &= ds_bloom_probe_maybe(&f[j], &q) == m; /* its mask kept */
            if (m)
                yes++;
            else
                no++;
        }
        /* A fresh probe at the largest k first, then a smaller one: the mask
         * is made again for each, not kept from a larger k. */
        ds_bloom_probe_init(&q, h);
        prefix_ok &= ds_bloom_probe_maybe(&f[4], &q) == ds_bloom_maybe(&f[4], h);
        prefix_ok &= ds_bloom_probe_maybe(&f[3], &q) == ds_bloom_maybe(&f[3], h);
    }
    CHECK(agree);
    CHECK(prefix_ok);
    /* Both answers came up, or the agreement says little. */
    CHECK(yes > NQ * NF / 20 && no > NQ * NF / 2);
    for (int j = 0; j < NF; j++)
        ds_bloom_free(&f[j]);
}

/* Measured false-positive rate against the configured one. n keys in, probes
 * absent keys out; the bound is wide enough for sampling noise (the run is
 * deterministic, so this is about the filter, not about luck) and narrow enough
 * to catch a filter that is off by a constant factor or misses its sizing. */
static void check_fp_rate(double rate, uint64_t n, uint64_t probes, int structured)
{
    uint64_t nb;
    unsigned k;
    ds_bloom b;
    uint64_t fp = 0;
    double measured, expected_hits, slack;

    CHECK_EQ(ds_bloom_params(n, rate, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_init(&b, nb, k), DS_BLOOM_OK);
    for (uint64_t i = 0; i < n; i++)
        ds_bloom_add(&b, structured ? i : key_hash("in", i));
    for (uint64_t i = 0; i < probes; i++)
        fp += (uint64_t)ds_bloom_maybe(&b, structured ? n + i : key_hash("out", i));
    measured = (double)fp / (double)probes;
    expected_hits = rate * (double)probes;
    /* 6 binomial standard deviations, plus 5% for the model's own error. */
    slack = 6.0 * sqrt(expected_hits) / (double)probes + 0.05 * rate;
    CHECK_AT(fabs(measured - rate) <= slack, __FILE__, __LINE__,
             "fp rate %.6f measured over %llu probes, configured %.6f (allowed +-%.6f)%s", measured,
             (unsigned long long)probes, rate, slack, structured ? " [counter hashes]" : "");
    printf("fp rate: configured %.4f%% measured %.4f%% (k=%u, %.2f bits/key, %llu probes)%s\n", rate * 100,
           measured * 100, k, (double)nb * 512.0 / (double)n, (unsigned long long)probes,
           structured ? " [counter hashes]" : "");
    ds_bloom_free(&b);
}

static void test_fp_rate(void)
{
    check_fp_rate(0.01, 100000, 1000000, 0);
    check_fp_rate(0.001, 100000, 2000000, 0);
    /* Hashes with structure (consecutive integers) are spread by the remix. */
    check_fp_rate(0.01, 100000, 1000000, 1);
}

static void test_round_trip(void)
{
    uint64_t nb;
    unsigned k;
    ds_bloom a, b;
    uint8_t *buf, *buf2;
    size_t len, len2;
    int same = 1;

    CHECK_EQ(ds_bloom_params(5000, 0.01, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_init(&a, nb, k), DS_BLOOM_OK);
    a.tag = UINT64_C(0x0123456789abcdef);
    for (uint64_t i = 0; i < 5000; i++)
        ds_bloom_add(&a, key_hash("rt", i));
    buf = serialise(&a, &len);
    CHECK_EQ(len, ds_bloom_serialized_size(&a));
    CHECK_EQ(len, DS_BLOOM_HEADER_BYTES + nb * 64 + DS_BLOOM_TRAILER_BYTES);
    CHECK_MEM(buf, "DSBF", 4);
    CHECK_EQ(buf[4], 1);
    CHECK_EQ(buf[5], 0);
    CHECK_EQ(buf[6], k);

    CHECK_EQ(ds_bloom_read(&b, buf, len), DS_BLOOM_OK);
    CHECK_EQ(b.nblocks, a.nblocks);
    CHECK_EQ(b.k, a.k);
    CHECK_EQ(b.nkeys, 5000);
    CHECK_EQ_U64(b.tag, a.tag);
    CHECK_EQ((uintptr_t)b.bits % 64, 0);
    CHECK_MEM(a.bits, b.bits, ds_bloom_nbytes(&a));
    for (uint64_t i = 0; i < 20000; i++)
        same &= ds_bloom_maybe(&a, key_hash("q", i)) == ds_bloom_maybe(&b, key_hash("q", i));
    CHECK(same);
    buf2 = serialise(&b, &len2);
    CHECK_EQ(len2, len);
    CHECK_MEM(buf, buf2, len);
    /* The loaded filter keeps working as a filter. */
    ds_bloom_add(&b, key_hash("late", 1));
    CHECK(ds_bloom_maybe(&b, key_hash("late", 1)));
    CHECK_EQ(b.nkeys, 5001);

    free(buf);
    free(buf2);
    ds_bloom_free(&a);
    ds_bloom_free(&b);

    /* An empty (n = 0) filter round-trips too. */
    CHECK_EQ(ds_bloom_params(0, 0.001, &nb, &k), DS_BLOOM_OK);
    CHECK_EQ(ds_bloom_init(&a, nb, k), DS_BLOOM_OK);
    buf = serialise(&a, &len);
    CHECK_EQ(read_copy(&b, buf, len), DS_BLOOM_OK);
    CHECK_EQ(b.nkeys, 0);
    CHECK(!ds_bloom_maybe(&b, key_hash("x", 0)));
    free(buf);
    ds_bloom_free(&a);
    ds_bloom_free(&b);
}

static void test_refusals(void)
{
    ds_bloom a, b;
    uint8_t *good, *bad;
    size_t len;
    uint64_t nb = 3;

    CHECK_EQ(ds_bloom_init(&a, nb, 5), DS_BLOOM_OK);
    a.tag = 42;
    for (uint64_t i = 0; i < 40; i++)
        ds_bloom_add(&a, key_hash("ref", i));
    good = serialise(&a, &len);
    bad = malloc(len + 16);
    if (bad == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    CHECK_EQ(read_copy(&b, good, len), DS_BLOOM_OK);
    ds_bloom_free(&b);

#define REFUSED(buf_, len_, code_)                                                                 \
    do {                                                                                           \
        b.bits = (uint64_t *)(uintptr_t)1; /* read must overwrite, not free, what it is given */  \
        CHECK_EQ(read_copy(&b, (buf_), (len_)), (code_));                                          \
        CHECK(b.bits == NULL);                                                                     \
    } while (0)

    /* Short buffers: below the magic, below the version, below the header. */
    CHECK_EQ(ds_bloom_read(&b, NULL, 0), DS_BLOOM_ESHORT);
    REFUSED(good, 0, DS_BLOOM_ESHORT);
    REFUSED(good, 3, DS_BLOOM_ESHORT);
    REFUSED(good, 5, DS_BLOOM_ESHORT);
    REFUSED(good, DS_BLOOM_HEADER_BYTES, DS_BLOOM_ESHORT);
    REFUSED(good, DS_BLOOM_HEADER_BYTES + DS_BLOOM_TRAILER_BYTES - 1, DS_BLOOM_ESHORT);
    /* Truncated anywhere in the bit array or checksum. */
    REFUSED(good, len - 1, DS_BLOOM_ESHORT);
    REFUSED(good, len - 8, DS_BLOOM_ESHORT);
    REFUSED(good, len - 64, DS_BLOOM_ESHORT);
    /* Trailing bytes. */
    memcpy(bad, good, len);
    bad[len] = 0;
    REFUSED(bad, len + 1, DS_BLOOM_ELENGTH);

    /* Bad magic, even in a buffer too short to be a filter. */
    memcpy(bad, good, len);
    bad[0] = 'X';
    REFUSED(bad, len, DS_BLOOM_EMAGIC);
    REFUSED(bad, 4, DS_BLOOM_EMAGIC);
    REFUSED((const uint8_t *)"SQLite format 3", 16, DS_BLOOM_EMAGIC);

    /* Other versions, older and newer. */
    memcpy(bad, good, len);
    bad[4] = 2;
    REFUSED(bad, len, DS_BLOOM_EVERSION);
    bad[4] = 0;
    REFUSED(bad, len, DS_BLOOM_EVERSION);
    bad[4] = 1;
    bad[5] = 1; /* version 257 */
    REFUSED(bad, len, DS_BLOOM_EVERSION);
    REFUSED(bad, 6, DS_BLOOM_EVERSION);

    /* Header fields out of range. */
    memcpy(bad, good, len);
    bad[6] = 0;
    REFUSED(bad, len, DS_BLOOM_EHEADER);
    bad[6] = DS_BLOOM_MAX_K + 1;
    REFUSED(bad, len, DS_BLOOM_EHEADER);
    memcpy(bad, good, len);
    bad[7] = 1;
    REFUSED(bad, len, DS_BLOOM_EHEADER);
    memcpy(bad, good, len);
    put_le64(bad + 8, 0);
    REFUSED(bad, len, DS_BLOOM_EHEADER);
    put_le64(bad + 8, DS_BLOOM_MAX_BLOCKS + 1);
    REFUSED(bad, len, DS_BLOOM_EHEADER);
    put_le64(bad + 8, UINT64_MAX);
    REFUSED(bad, len, DS_BLOOM_EHEADER);

    /* nblocks inconsistent with the length: more blocks than bytes (short),
     * fewer (trailing bytes), and a huge in-range count (must not overflow). */
    memcpy(bad, good, len);
    put_le64(bad + 8, nb + 1);
    REFUSED(bad, len, DS_BLOOM_ESHORT);
    put_le64(bad + 8, nb - 1);
    REFUSED(bad, len, DS_BLOOM_ELENGTH);
    put_le64(bad + 8, DS_BLOOM_MAX_BLOCKS);
    REFUSED(bad, len, DS_BLOOM_ESHORT);
    /* A different k with the right length is caught by the checksum. */
    memcpy(bad, good, len);
    bad[6] = 6;
    REFUSED(bad, len, DS_BLOOM_ECHECKSUM);

    /* Corruption: a flipped bit in the array, in nkeys, in the tag, in the checksum. */
    memcpy(bad, good, len);
    bad[DS_BLOOM_HEADER_BYTES + 70] ^= 0x10;
    REFUSED(bad, len, DS_BLOOM_ECHECKSUM);
    memcpy(bad, good, len);
    bad[16] ^= 1;
    REFUSED(bad, len, DS_BLOOM_ECHECKSUM);
    memcpy(bad, good, len);
    bad[31] ^= 0x80;
    REFUSED(bad, len, DS_BLOOM_ECHECKSUM);
    memcpy(bad, good, len);
    bad[len - 1] ^= 0x01;
    REFUSED(bad, len, DS_BLOOM_ECHECKSUM);

    /* Every single-bit flip anywhere in the file is refused. */
    {
        size_t accepted = 0;
        for (size_t i = 0; i < len; i++) {
            for (int bit = 0; bit < 8; bit++) {
                memcpy(bad, good, len);
                bad[i] ^= (uint8_t)(1u << bit);
                if (ds_bloom_read(&b, bad, len) == DS_BLOOM_OK) {
                    accepted++;
                    ds_bloom_free(&b);
                }
            }
        }
        CHECK_EQ(accepted, 0);
    }

    /* Every code has its own message. */
    {
        static const int codes[] = {DS_BLOOM_OK,     DS_BLOOM_EINVAL,  DS_BLOOM_ETOOBIG, DS_BLOOM_ENOMEM,
                                    DS_BLOOM_ESHORT, DS_BLOOM_EMAGIC,  DS_BLOOM_EVERSION, DS_BLOOM_EHEADER,
                                    DS_BLOOM_ELENGTH, DS_BLOOM_ECHECKSUM};
        const size_t n = sizeof codes / sizeof codes[0];
        for (size_t i = 0; i < n; i++) {
            CHECK(ds_bloom_strerror(codes[i]) != NULL);
            for (size_t j = 0; j < i; j++)
                CHECK(codes[i] != codes[j] && strcmp(ds_bloom_strerror(codes[i]), ds_bloom_strerror(codes[j])) != 0);
        }
        CHECK(ds_bloom_strerror(12345) != NULL);
    }
#undef REFUSED

    free(good);
    free(bad);
    ds_bloom_free(&a);
}

int main(void)
{
    ds_hash_key_init(&test_key, (const uint8_t *)"bloom-test-key-0");
    test_params();
    test_init_free();
    test_one_block();
    test_no_false_negatives();
    test_bulk();
    test_probe();
    test_fp_rate();
    test_round_trip();
    test_refusals();
    return check_report();
}
