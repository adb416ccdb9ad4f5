/* Unit tests of the plain-C engine in csrc/: keyed SipHash-2-4, ds_reduce,
 * the canonical-intent buffer, the record codec and the claim decision table.
 *
 * Built and run by tests/test_csrc.py (with ASan/UBSan where available):
 *   cc -std=c11 -Wall -Wextra -Werror -Icsrc csrc/tests/test_engine.c csrc/ds_*.c
 * The last line printed is "N passed, M failed"; the exit status is non-zero
 * on any failure.
 */
#include "../ds_canon.h"
#include "../ds_decide.h"
#include "../ds_hash.h"
#include "../ds_record.h"

#include "check.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* SipHash-2-4 reference vectors                                            */

/* Copied from vectors.h of the SipHash reference implementation
 * (github.com/veorq/SipHash): key = 00 01 .. 0f, message = 00 01 .. (len-1),
 * output bytes as the reference writes them (little-endian). Lengths 0..17
 * cover every tail length and both block boundaries; 63 is the last vector. */
static const struct {
    size_t len;
    uint8_t out[8];
} sip64_vectors[] = {
    {0, {0x31, 0x0e, 0x0e, 0xdd, 0x47, 0xdb, 0x6f, 0x72}},
    {1, {0xfd, 0x67, 0xdc, 0x93, 0xc5, 0x39, 0xf8, 0x74}},
    {2, {0x5a, 0x4f, 0xa9, 0xd9, 0x09, 0x80, 0x6c, 0x0d}},
    {3, {0x2d, 0x7e, 0xfb, 0xd7, 0x96, 0x66, 0x67, 0x85}},
    {4, {0xb7, 0x87, 0x71, 0x27, 0xe0, 0x94, 0x27, 0xcf}},
    {5, {0x8d, 0xa6, 0x99, 0xcd, 0x64, 0x55, 0x76, 0x18}},
    {6, {0xce, 0xe3, 0xfe, 0x58, 0x6e, 0x46, 0xc9, 0xcb}},
    {7, {0x37, 0xd1, 0x01, 0x8b, 0xf5, 0x00, 0x02, 0xab}},
    {8, {0x62, 0x24, 0x93, 0x9a, 0x79, 0xf5, 0xf5, 0x93}},
    {9, {0xb0, 0xe4, 0xa9, 0x0b, 0xdf, 0x82, 0x00, 0x9e}},
    {10, {0xf3, 0xb9, 0xdd, 0x94, 0xc5, 0xbb, 0x5d, 0x7a}},
    {11, {0xa7, 0xad, 0x6b, 0x22, 0x46, 0x2f, 0xb3, 0xf4}},
    {12, {0xfb, 0xe5, 0x0e, 0x86, 0xbc, 0x8f, 0x1e, 0x75}},
    {13, {0x90, 0x3d, 0x84, 0xc0, 0x27, 0x56, 0xea, 0x14}},
    {14, {0xee, 0xf2, 0x7a, 0x8e, 0x90, 0xca, 0x23, 0xf7}},
    {15, {0xe5, 0x45, 0xbe, 0x49, 0x61, 0xca, 0x29, 0xa1}},
    {16, {0xdb, 0x9b, 0xc2, 0x57, 0x7f, 0xcc, 0x2a, 0x3f}},
    {17, {0x94, 0x47, 0xbe, 0x2c, 0xf5, 0xe9, 0x9a, 0x69}},
    {63, {0x72, 0x45, 0x06, 0xeb, 0x4c, 0x32, 0x8a, 0x95}},
};

static const struct {
    size_t len;
    uint8_t out[16];
} sip128_vectors[] = {
    {0, {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93}},
    {1, {0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45}},
    {2, {0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a, 0xff, 0xe4}},
    {3, {0x9c, 0x70, 0xb6, 0x0c, 0x52, 0x67, 0xa9, 0x4e, 0x5f, 0x33, 0xb6, 0xb0, 0x29, 0x85, 0xed, 0x51}},
    {4, {0xf8, 0x81, 0x64, 0xc1, 0x2d, 0x9c, 0x8f, 0xaf, 0x7d, 0x0f, 0x6e, 0x7c, 0x7b, 0xcd, 0x55, 0x79}},
    {5, {0x13, 0x68, 0x87, 0x59, 0x80, 0x77, 0x6f, 0x88, 0x54, 0x52, 0x7a, 0x07, 0x69, 0x0e, 0x96, 0x27}},
    {6, {0x14, 0xee, 0xca, 0x33, 0x8b, 0x20, 0x86, 0x13, 0x48, 0x5e, 0xa0, 0x30, 0x8f, 0xd7, 0xa1, 0x5e}},
    {7, {0xa1, 0xf1, 0xeb, 0xbe, 0xd8, 0xdb, 0xc1, 0x53, 0xc0, 0xb8, 0x4a, 0xa6, 0x1f, 0xf0, 0x82, 0x39}},
    {8, {0x3b, 0x62, 0xa9, 0xba, 0x62, 0x58, 0xf5, 0x61, 0x0f, 0x83, 0xe2, 0x64, 0xf3, 0x14, 0x97, 0xb4}},
    {9, {0x26, 0x44, 0x99, 0x06, 0x0a, 0xd9, 0xba, 0xab, 0xc4, 0x7f, 0x8b, 0x02, 0xbb, 0x6d, 0x71, 0xed}},
    {10, {0x00, 0x11, 0x0d, 0xc3, 0x78, 0x14, 0x69, 0x56, 0xc9, 0x54, 0x47, 0xd3, 0xf3, 0xd0, 0xfb, 0xba}},
    {11, {0x01, 0x51, 0xc5, 0x68, 0x38, 0x6b, 0x66, 0x77, 0xa2, 0xb4, 0xdc, 0x6f, 0x81, 0xe5, 0xdc, 0x18}},
    {12, {0xd6, 0x26, 0xb2, 0x66, 0x90, 0x5e, 0xf3, 0x58, 0x82, 0x63, 0x4d, 0xf6, 0x85, 0x32, 0xc1, 0x25}},
    {13, {0x98, 0x69, 0xe2, 0x47, 0xe9, 0xc0, 0x8b, 0x10, 0xd0, 0x29, 0x93, 0x4f, 0xc4, 0xb9, 0x52, 0xf7}},
    {14, {0x31, 0xfc, 0xef, 0xac, 0x66, 0xd7, 0xde, 0x9c, 0x7e, 0xc7, 0x48, 0x5f, 0xe4, 0x49, 0x49, 0x02}},
    {15, {0x54, 0x93, 0xe9, 0x99, 0x33, 0xb0, 0xa8, 0x11, 0x7e, 0x08, 0xec, 0x0f, 0x97, 0xcf, 0xc3, 0xd9}},
    {16, {0x6e, 0xe2, 0xa4, 0xca, 0x67, 0xb0, 0x54, 0xbb, 0xfd, 0x33, 0x15, 0xbf, 0x85, 0x23, 0x05, 0x77}},
    {17, {0x47, 0x3d, 0x06, 0xe8, 0x73, 0x8d, 0xb8, 0x98, 0x54, 0xc0, 0x66, 0xc4, 0x7a, 0xe4, 0x77, 0x40}},
    {63, {0x51, 0x50, 0xd1, 0x77, 0x2f, 0x50, 0x83, 0x4a, 0x50, 0x3e, 0x06, 0x9a, 0x97, 0x3f, 0xbd, 0x7c}},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void reference_key(ds_hash_key *key, uint8_t msg[64])
{
    uint8_t secret[16];
    for (int i = 0; i < 16; i++)
        secret[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    ds_hash_key_init(key, secret);
}

static void test_siphash_vectors(void)
{
    ds_hash_key key;
    uint8_t msg[64];
    reference_key(&key, msg);

    for (size_t i = 0; i < COUNT(sip64_vectors); i++) {
        size_t len = sip64_vectors[i].len;
        uint64_t want = 0;
        for (int b = 7; b >= 0; b--)
            want = want << 8 | sip64_vectors[i].out[b];
        uint64_t got = ds_siphash64(&key, msg, len);
        CHECK_AT(got == want, __FILE__, __LINE__, "siphash64 len %zu: got 0x%016" PRIx64 ", want 0x%016" PRIx64,
                 len, got, want);
    }
    for (size_t i = 0; i < COUNT(sip128_vectors); i++) {
        size_t len = sip128_vectors[i].len;
        uint8_t got[16];
        ds_siphash128(&key, msg, len, got);
        CHECK_AT(memcmp(got, sip128_vectors[i].out, 16) == 0, __FILE__, __LINE__, "siphash128 len %zu", len);
    }
}

static void test_siphash_properties(void)
{
    ds_hash_key key;
    uint8_t msg[64];
    reference_key(&key, msg);

    /* The 128-bit variant is not the 64-bit one padded: its first half differs
     * (different initialisation), so a digest cannot be mistaken for a route hash. */
    uint8_t wide[16];
    ds_siphash128(&key, msg, 8, wide);
    uint64_t lo = 0;
    for (int b = 7; b >= 0; b--)
        lo = lo << 8 | wide[b];
    CHECK(lo != ds_siphash64(&key, msg, 8));

    /* Unaligned input must hash like aligned input (the loader reads bytes). */
    uint8_t shifted[65];
    memcpy(shifted + 1, msg, 64);
    CHECK_EQ_U64(ds_siphash64(&key, shifted + 1, 63), ds_siphash64(&key, msg, 63));
    uint8_t a[16], b[16];
    ds_siphash128(&key, shifted + 1, 63, a);
    ds_siphash128(&key, msg, 63, b);
    CHECK_MEM(a, b, 16);

    /* The key is loaded little-endian: k0 from bytes 0..7, k1 from 8..15. */
    CHECK_EQ_U64(key.k0, 0x0706050403020100ULL);
    CHECK_EQ_U64(key.k1, 0x0f0e0d0c0b0a0908ULL);
}

/* ------------------------------------------------------------------------ */
/* ds_table_hash                                                             */

static void test_table_hash(void)
{
    /* Every byte counts, at every length (the last word overlaps the one
     * before it past 8 bytes, and short keys are read byte by byte): flipping
     * any bit of a key changes its hash. */
    uint8_t msg[40];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (uint8_t)(i * 7 + 1);
    int all_bits = 1;
    for (size_t len = 1; len <= sizeof msg; len++) {
        uint64_t h = ds_table_hash(msg, len, 42);
        for (size_t i = 0; i < len; i++)
            for (int bit = 0; bit < 8; bit++) {
                msg[i] ^= (uint8_t)(1u << bit);
                if (ds_table_hash(msg, len, 42) == h)
                    all_bits = 0;
                msg[i] ^= (uint8_t)(1u << bit);
            }
        /* The length counts: a key and the same bytes one shorter differ. */
        CHECK(ds_table_hash(msg, len - 1, 42) != h);
    }
    CHECK(all_bits);
    /* Unaligned input hashes as aligned input does; the seed counts. */
    uint8_t shifted[41];
    memcpy(shifted + 1, msg, 40);
    CHECK_EQ_U64(ds_table_hash(shifted + 1, 27, 9), ds_table_hash(msg, 27, 9));
    CHECK(ds_table_hash(msg, 27, 9) != ds_table_hash(msg, 27, 10));
    /* The reference stream's keys (21 bytes, a counter in hex inside) spread
     * evenly over a table's slots by the low bits linear probing takes:
     * 2**16 keys into 2**12 slots, 16 a slot on average, none past 48. */
    static unsigned slots[1 << 12];
    memset(slots, 0, sizeof slots);
    char key[32];
    for (unsigned k = 0; k < (1u << 16); k++) {
        int n = snprintf(key, sizeof key, "order-%012x:v1", k * 2654435761u);
        slots[ds_table_hash(key, (size_t)n, 0x5eed) & ((1u << 12) - 1)]++;
    }
    unsigned most = 0;
    for (size_t i = 0; i < COUNT(slots); i++)
        if (slots[i] > most)
            most = slots[i];
    CHECK_AT(most <= 48, __FILE__, __LINE__, "most keys in one slot: %u", most);
}

/* ------------------------------------------------------------------------ */
/* ds_reduce                                                                 */

static void test_crc32(void)
{
    /* The standard check value, and zlib's chaining: one call over a whole
     * equals two calls over its halves. */
    CHECK_EQ_U64(ds_crc32(0, "123456789", 9), 0xCBF43926u);
    CHECK_EQ_U64(ds_crc32(0, "", 0), 0);
    CHECK_EQ_U64(ds_crc32(ds_crc32(0, "12345", 5), "6789", 4), 0xCBF43926u);
    CHECK(ds_crc32(0, "123456780", 9) != 0xCBF43926u);
    CHECK_EQ_U64(ds_crc32_tables(0, "123456789", 9), 0xCBF43926u);
    /* Every length and alignment up to past the carry-less way's 64-byte
     * steps (every 16-byte fold, four lanes and one, and every byte tail),
     * some longer, against the bit-at-a-time definition; both ways, and
     * chained at several splits (one of them mid-fold). */
    uint8_t buf[1200];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131u + 7u + (i >> 7));
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; off + len <= sizeof buf; len += (len < 300 ? 1 : 97)) {
            uint32_t want = 0xFFFFFFFFu;
            for (size_t i = 0; i < len; i++) {
                want ^= buf[off + i];
                for (int k = 0; k < 8; k++)
                    want = (want & 1) ? 0xEDB88320u ^ (want >> 1) : want >> 1;
            }
            want = ~want;
            CHECK_EQ_U64(ds_crc32(0, buf + off, len), want);
            CHECK_EQ_U64(ds_crc32_tables(0, buf + off, len), want);
            size_t cuts[] = {len / 3, len / 2 + 5 <= len ? len / 2 + 5 : len, len > 70 ? 70 : len};
            for (size_t c = 0; c < COUNT(cuts); c++) {
                size_t cut = cuts[c];
                CHECK_EQ_U64(ds_crc32(ds_crc32(0, buf + off, cut), buf + off + cut, len - cut), want);
                CHECK_EQ_U64(ds_crc32_tables(ds_crc32(0, buf + off, cut), buf + off + cut, len - cut), want);
            }
        }
    }
#if defined(__x86_64__)
    /* Every x86-64 this runs on in CI has PCLMULQDQ: the test above must
     * have tried the carry-less way, not the tables twice. */
    CHECK(ds_crc32_multiplies());
#endif
}

static void test_reduce(void)
{
    static const uint32_t ns[] = {1, 2, 3, 4, 7, 16, 255, 1024, 65537, UINT32_MAX};
    for (size_t i = 0; i < COUNT(ns); i++) {
        uint32_t n = ns[i];
        CHECK_EQ(ds_reduce(0, n), 0);
        CHECK_EQ(ds_reduce(UINT64_MAX, n), n - 1);
        /* Only the high 32 bits count (documented): low bits change nothing. */
        CHECK_EQ(ds_reduce(0x00000000ffffffffULL, n), 0);
        CHECK_EQ(ds_reduce(0xffffffff00000000ULL, n), n - 1);
        int in_range = 1;
        uint64_t h = 0x9e3779b97f4a7c15ULL;
        for (int k = 0; k < 100000; k++) {
            h = h * 6364136223846793005ULL + 1442695040888963407ULL;
            if (ds_reduce(h, n) >= n)
                in_range = 0;
        }
        CHECK_AT(in_range, __FILE__, __LINE__, "ds_reduce(h, %u) < %u for all sampled h", n, n);
    }
    /* Bucket edges for n = 7: bucket b starts at ceil(b * 2**32 / 7). */
    CHECK_EQ(ds_reduce((uint64_t)613566756 << 32, 7), 0);
    CHECK_EQ(ds_reduce((uint64_t)613566757 << 32, 7), 1);
    CHECK_EQ(ds_reduce((uint64_t)3681400539u << 32, 7), 5);
    CHECK_EQ(ds_reduce((uint64_t)3681400540u << 32, 7), 6);
    /* Bucket sizes over the full high word differ by at most one value per
     * 2**32 (no modulo-style bias): count exactly via the edges. */
    for (uint32_t n = 1; n <= 64; n++) {
        uint64_t lo_size = UINT64_MAX, hi_size = 0, start = 0;
        for (uint32_t bkt = 0; bkt < n; bkt++) {
            uint64_t end = (((uint64_t)(bkt + 1) << 32) + n - 1) / n; /* first k of bucket bkt+1 */
            uint64_t size = end - start;
            if (start < (1ULL << 32))
                CHECK_EQ(ds_reduce(start << 32, n), bkt);
            if (end - 1 < (1ULL << 32))
                CHECK_EQ(ds_reduce((end - 1) << 32 | 0xffffffffULL, n), bkt);
            if (size < lo_size)
                lo_size = size;
            if (size > hi_size)
                hi_size = size;
            start = end;
        }
        CHECK(hi_size - lo_size <= 1);
    }
}

/* ------------------------------------------------------------------------ */
/* ds_buf and JSON string escaping                                           */

/* Escape s (len bytes) into a buffer with the given limit; returns the rc and
 * leaves the bytes in *out (caller frees). */
static int escape(const char *s, size_t len, size_t limit, ds_buf *out)
{
    ds_buf_init(out, limit);
    return ds_buf_put_json_string(out, (const uint8_t *)s, len);
}

static void check_escape(const char *in, size_t in_len, const char *want, int line)
{
    ds_buf b;
    size_t want_len = strlen(want);
    int rc = escape(in, in_len, 1 << 20, &b);
    CHECK_AT(rc == DS_BUF_OK, __FILE__, line, "escape rc %d", rc);
    CHECK_AT(b.len == want_len && (want_len == 0 || memcmp(b.data, want, want_len) == 0), __FILE__, line,
             "escape: got %.*s, want %s", (int)b.len, b.data ? (const char *)b.data : "", want);
    ds_buf_free(&b);

    /* The escaped form is exactly what the limit is checked against: at its
     * length it fits, one byte less is refused. */
    rc = escape(in, in_len, want_len, &b);
    CHECK_AT(rc == DS_BUF_OK && b.len == want_len, __FILE__, line, "escape at limit %zu: rc %d", want_len, rc);
    ds_buf_free(&b);
    rc = escape(in, in_len, want_len - 1, &b);
    CHECK_AT(rc == DS_BUF_TOO_LARGE, __FILE__, line, "escape over limit %zu: rc %d", want_len - 1, rc);
    CHECK_AT(b.len <= want_len - 1, __FILE__, line, "escape over limit wrote %zu bytes", b.len);
    ds_buf_free(&b);
}

#define CHECK_ESCAPE(lit, want) check_escape((lit), sizeof(lit) - 1, (want), __LINE__)

static void test_buf_limit(void)
{
    ds_buf b;
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;

    /* Exactly at the limit passes; one byte over fails and writes nothing. */
    ds_buf_init(&b, 10);
    CHECK_EQ(ds_buf_put(&b, data, 10), DS_BUF_OK);
    CHECK_EQ(b.len, 10);
    CHECK_EQ(ds_buf_put_byte(&b, 'x'), DS_BUF_TOO_LARGE);
    CHECK_EQ(ds_buf_put(&b, data, 1), DS_BUF_TOO_LARGE);
    CHECK_EQ(b.len, 10);
    CHECK_EQ(ds_buf_put(&b, NULL, 0), DS_BUF_OK); /* an empty put at the limit is fine */
    CHECK_MEM(b.data, data, 10);
    ds_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0);

    ds_buf_init(&b, 10);
    CHECK_EQ(ds_buf_put(&b, data, 11), DS_BUF_TOO_LARGE);
    CHECK_EQ(b.len, 0);
    CHECK_EQ(ds_buf_put(&b, data, 4), DS_BUF_OK);
    CHECK_EQ(ds_buf_put(&b, data + 4, 7), DS_BUF_TOO_LARGE);
    CHECK_EQ(ds_buf_put(&b, data + 4, 6), DS_BUF_OK);
    CHECK_MEM(b.data, data, 10);
    ds_buf_free(&b);

    /* Growth past the initial allocation, byte by byte up to a limit that is
     * not a power of two (the capacity is clamped to it). */
    ds_buf_init(&b, 300);
    int ok = 1;
    for (size_t i = 0; i < 300; i++)
        if (ds_buf_put_byte(&b, data[i]) != DS_BUF_OK)
            ok = 0;
    CHECK(ok);
    CHECK_EQ(b.len, 300);
    CHECK(b.cap <= 300);
    CHECK_MEM(b.data, data, 300);
    CHECK_EQ(ds_buf_put_byte(&b, 0), DS_BUF_TOO_LARGE);
    CHECK_EQ(b.len, 300);
    ds_buf_free(&b);

    /* In the caller's bytes until they are full, then on the heap with what
     * they held; the caller's bytes are never freed (ASan would say). */
    {
        uint8_t first[16];
        ds_buf_init_in(&b, 300, first, sizeof first);
        CHECK_EQ(ds_buf_put(&b, data, 16), DS_BUF_OK);
        CHECK(b.data == first && b.len == 16);
        CHECK_EQ(ds_buf_put_byte(&b, data[16]), DS_BUF_OK);
        CHECK(b.data != first && b.len == 17);
        CHECK_EQ(ds_buf_put(&b, data + 17, 283), DS_BUF_OK);
        CHECK_MEM(b.data, data, 300);
        CHECK_EQ(ds_buf_put_byte(&b, 0), DS_BUF_TOO_LARGE);
        ds_buf_free(&b);
        /* The limit holds inside the caller's bytes too. */
        ds_buf_init_in(&b, 4, first, sizeof first);
        CHECK_EQ(ds_buf_put(&b, data, 5), DS_BUF_TOO_LARGE);
        CHECK_EQ(ds_buf_put(&b, data, 4), DS_BUF_OK);
        CHECK_EQ(ds_buf_put_byte(&b, 0), DS_BUF_TOO_LARGE);
        CHECK(b.data == first);
        ds_buf_free(&b);
    }

    /* A size that would wrap size_t is refused, not wrapped. */
    ds_buf_init(&b, SIZE_MAX);
    CHECK_EQ(ds_buf_put(&b, data, 1), DS_BUF_OK);
    CHECK_EQ(ds_buf_put(&b, data, SIZE_MAX), DS_BUF_TOO_LARGE);
    CHECK_EQ(b.len, 1);
    ds_buf_free(&b);

    /* A JSON string is limited by its escaped length, not its input length. */
    ds_buf_init(&b, 5);
    CHECK_EQ(ds_buf_put_json_string(&b, (const uint8_t *)"abc", 3), DS_BUF_OK); /* "abc" = 5 bytes */
    CHECK_EQ(b.len, 5);
    ds_buf_free(&b);
    ds_buf_init(&b, 4);
    CHECK_EQ(ds_buf_put_json_string(&b, (const uint8_t *)"abc", 3), DS_BUF_TOO_LARGE);
    ds_buf_free(&b);
}

static void test_json_escaping(void)
{
    CHECK_ESCAPE("", "\"\"");
    CHECK_ESCAPE("plain text", "\"plain text\"");
    CHECK_ESCAPE("\"", "\"\\\"\"");
    CHECK_ESCAPE("\\", "\"\\\\\"");
    CHECK_ESCAPE("\b", "\"\\b\"");
    CHECK_ESCAPE("\f", "\"\\f\"");
    CHECK_ESCAPE("\n", "\"\\n\"");
    CHECK_ESCAPE("\r", "\"\\r\"");
    CHECK_ESCAPE("\t", "\"\\t\"");
    CHECK_ESCAPE("\x00", "\"\\u0000\""); /* length-delimited: an embedded NUL is data */
    CHECK_ESCAPE("\x01", "\"\\u0001\"");
    CHECK_ESCAPE("\x0b", "\"\\u000b\""); /* vertical tab has no short form in JSON */
    CHECK_ESCAPE("\x1b", "\"\\u001b\"");
    CHECK_ESCAPE("\x1f", "\"\\u001f\"");
    CHECK_ESCAPE(" ", "\" \"");
    CHECK_ESCAPE("/", "\"/\""); /* solidus is not escaped */
    CHECK_ESCAPE("\x7f", "\"\x7f\"");
    /* UTF-8 passes through byte for byte: e-acute, euro sign, U+1F600, U+2028. */
    CHECK_ESCAPE("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8\"");
    /* Verbatim runs around escapes are flushed in the right order. */
    CHECK_ESCAPE("a\"b\\c\nd\x01" "e", "\"a\\\"b\\\\c\\nd\\u0001e\"");
    CHECK_ESCAPE("\n\n", "\"\\n\\n\"");
    CHECK_ESCAPE("x\x1f", "\"x\\u001f\"");

    /* Every control character: the five short forms, \u00xx otherwise. */
    for (int c = 0; c < 0x20; c++) {
        char in[1] = {(char)c};
        char want[16];
        const char *shortform = NULL;
        switch (c) {
        case 0x08: shortform = "\"\\b\""; break;
        case 0x09: shortform = "\"\\t\""; break;
        case 0x0a: shortform = "\"\\n\""; break;
        case 0x0c: shortform = "\"\\f\""; break;
        case 0x0d: shortform = "\"\\r\""; break;
        }
        if (shortform)
            snprintf(want, sizeof want, "%s", shortform);
        else
            snprintf(want, sizeof want, "\"\\u%04x\"", c);
        check_escape(in, 1, want, __LINE__);
    }
    /* Everything from 0x20 up (bar the two mandatory escapes) is copied. */
    int verbatim = 1;
    for (int c = 0x20; c < 0x100; c++) {
        if (c == '"' || c == '\\')
            continue;
        ds_buf b;
        char in[1] = {(char)c};
        if (escape(in, 1, 16, &b) != DS_BUF_OK || b.len != 3 || b.data[1] != (uint8_t)c)
            verbatim = 0;
        ds_buf_free(&b);
    }
    CHECK(verbatim);

    /* Appends after existing content (keys and values share one buffer). */
    ds_buf b;
    ds_buf_init(&b, 64);
    CHECK_EQ(ds_buf_put_byte(&b, '{'), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_json_string(&b, (const uint8_t *)"k", 1), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_byte(&b, ':'), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_json_string(&b, (const uint8_t *)"v\t", 2), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_byte(&b, '}'), DS_BUF_OK);
    CHECK(b.len == 11 && memcmp(b.data, "{\"k\":\"v\\t\"}", 11) == 0);
    ds_buf_free(&b);
}

static void check_int(long long v, const char *want, int line)
{
    ds_buf b;
    ds_buf_init(&b, 64);
    CHECK_AT(ds_buf_put_int(&b, v) == DS_BUF_OK, __FILE__, line, "ds_buf_put_int(%lld)", v);
    CHECK_AT(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0, __FILE__, line, "%lld as %.*s, not %s", v,
             (int)b.len, (const char *)b.data, want);
    ds_buf_free(&b);
}

static void test_int_text(void)
{
    check_int(0, "0", __LINE__);
    check_int(7, "7", __LINE__);
    check_int(10, "10", __LINE__);
    check_int(-1, "-1", __LINE__);
    check_int(1234, "1234", __LINE__);
    check_int(-1000000, "-1000000", __LINE__);
    check_int(LLONG_MAX, "9223372036854775807", __LINE__);
    check_int(LLONG_MIN, "-9223372036854775808", __LINE__); /* its magnitude is not a long long */
    /* Every power of ten and its neighbours: the length is counted apart from the writing. */
    long long p = 1;
    for (int i = 0; i < 18; i++, p *= 10) {
        char want[32];
        for (long long v = p - 1; v <= p + 1; v++) {
            snprintf(want, sizeof want, "%lld", v);
            check_int(v, want, __LINE__);
            snprintf(want, sizeof want, "%lld", -v);
            check_int(-v, want, __LINE__);
        }
    }
    /* All or nothing at the limit. */
    ds_buf b;
    ds_buf_init(&b, 4);
    CHECK_EQ(ds_buf_put_int(&b, -999), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_int(&b, 1), DS_BUF_TOO_LARGE);
    CHECK(b.len == 4 && memcmp(b.data, "-999", 4) == 0);
    ds_buf_free(&b);
}

static ds_canon_field field(const char *key, int kind, const char *text, long long num)
{
    ds_canon_field f;
    memset(&f, 0, sizeof f);
    f.key = (const uint8_t *)key;
    f.klen = strlen(key);
    f.kind = kind;
    f.text = (const uint8_t *)text;
    f.tlen = text ? strlen(text) : 0;
    f.num = num;
    return f;
}

static void check_flat(ds_canon_field *f, size_t n, const char *want, int line)
{
    ds_buf b;
    ds_buf_init(&b, 256);
    CHECK_AT(ds_buf_put_flat_object(&b, f, n) == DS_BUF_OK, __FILE__, line, "%s", want);
    CHECK_AT(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0, __FILE__, line, "%.*s, not %s", (int)b.len,
             (const char *)b.data, want);
    ds_buf_free(&b);
}

static void test_flat_object(void)
{
    /* The reference stream's intent, its members given in any order. */
    ds_canon_field a[] = {field("currency", DS_FIELD_STRING, "EUR", 0), field("amount", DS_FIELD_INT, NULL, 1234)};
    check_flat(a, 2, "{\"amount\":1234,\"currency\":\"EUR\"}", __LINE__);
    check_flat(a, 2, "{\"amount\":1234,\"currency\":\"EUR\"}", __LINE__); /* sorted in place: again the same */
    check_flat(a, 0, "{}", __LINE__);

    /* Every kind; keys by their bytes, a key before a longer one it begins,
     * escapes in keys and values as ds_buf_put_json_string writes them. */
    ds_canon_field b[] = {
        field("ab", DS_FIELD_TRUE, NULL, 0),        field("a", DS_FIELD_FALSE, NULL, 0),
        field("B", DS_FIELD_NULL, NULL, 0),         field("a\"", DS_FIELD_INT, NULL, LLONG_MIN),
        field("\xc3\xa9", DS_FIELD_STRING, "\xe2\x82\xac", 0), field("\t", DS_FIELD_STRING, "x\ny\x01", 0),
    };
    check_flat(b, 6,
               "{\"\\t\":\"x\\ny\\u0001\",\"B\":null,\"a\":false,\"a\\\"\":-9223372036854775808,\"ab\":true,"
               "\"\xc3\xa9\":\"\xe2\x82\xac\"}",
               __LINE__);

    /* All or nothing: a buffer one byte short takes none of it; a field of no kind is refused. */
    ds_buf buf;
    ds_buf_init(&buf, 32);
    CHECK_EQ(ds_buf_put_byte(&buf, '['), DS_BUF_OK);
    CHECK_EQ(ds_buf_put_flat_object(&buf, a, 2), DS_BUF_TOO_LARGE); /* 32 bytes after the 1 */
    CHECK_EQ(buf.len, 1);
    ds_buf_free(&buf);
    ds_buf_init(&buf, 32);
    CHECK_EQ(ds_buf_put_flat_object(&buf, a, 2), DS_BUF_OK);
    CHECK_EQ(buf.len, 32);
    ds_buf_free(&buf);
    /* A length whose literal would not fit in a size_t is refused before
     * any byte is read (the data here is shorter than it claims). */
    ds_canon_field huge[] = {field("k", DS_FIELD_STRING, "v", 0)};
    huge[0].tlen = SIZE_MAX / 2;
    ds_buf_init(&buf, SIZE_MAX);
    CHECK_EQ(ds_buf_put_flat_object(&buf, huge, 1), DS_BUF_TOO_LARGE);
    huge[0].tlen = 1;
    huge[0].klen = SIZE_MAX / 2;
    CHECK_EQ(ds_buf_put_flat_object(&buf, huge, 1), DS_BUF_TOO_LARGE);
    CHECK_EQ(ds_buf_put_json_string(&buf, (const uint8_t *)"v", SIZE_MAX / 2), DS_BUF_TOO_LARGE);
    CHECK_EQ(buf.len, 0);
    ds_buf_free(&buf);
    ds_canon_field bad[] = {field("k", 99, NULL, 0)};
    ds_buf_init(&buf, 32);
    CHECK_EQ(ds_buf_put_flat_object(&buf, bad, 1), DS_BUF_INVALID);
    CHECK_EQ(buf.len, 0);
    ds_buf_free(&buf);
}

/* ------------------------------------------------------------------------ */
/* Record codec                                                              */

static void check_record_eq(const ds_record *a, const ds_record *b, int line)
{
    CHECK_AT(a->state == b->state, __FILE__, line, "state %u != %u", a->state, b->state);
    CHECK_AT(a->flags == b->flags, __FILE__, line, "flags %u != %u", a->flags, b->flags);
    CHECK_AT(a->attempts == b->attempts, __FILE__, line, "attempts");
    CHECK_AT(a->first_seen == b->first_seen, __FILE__, line, "first_seen");
    CHECK_AT(a->until == b->until, __FILE__, line, "until");
    CHECK_AT(a->token == b->token, __FILE__, line, "token");
    CHECK_AT(memcmp(a->intent, b->intent, 16) == 0, __FILE__, line, "intent");
    CHECK_AT(a->event_time == b->event_time, __FILE__, line, "event_time");
    CHECK_AT(a->other_events == b->other_events, __FILE__, line, "other_events");
    CHECK_AT(a->claimant_len == b->claimant_len &&
                 (a->claimant_len == 0 || memcmp(a->claimant, b->claimant, a->claimant_len) == 0),
             __FILE__, line, "claimant");
    CHECK_AT(a->event_id_len == b->event_id_len &&
                 (a->event_id_len == 0 || memcmp(a->event_id, b->event_id, a->event_id_len) == 0),
             __FILE__, line, "event_id");
    CHECK_AT(a->outcome_len == b->outcome_len &&
                 (a->outcome_len == 0 || memcmp(a->outcome, b->outcome, a->outcome_len) == 0),
             __FILE__, line, "outcome");
}

static uint8_t *encode(const ds_record *r, size_t *len)
{
    *len = ds_record_size(r);
    uint8_t *buf = malloc(*len + 1);
    size_t wrote = ds_record_encode(r, buf);
    CHECK_EQ(wrote, *len);
    return buf;
}

static void test_record_roundtrip(void)
{
    /* Every field at a distinctive value, the variable parts at the largest
     * lengths their u16/u16/u32 length fields are used for. */
    enum { CL = 65535, EV = 65535, OUT = 1 << 20 };
    uint8_t *claimant = malloc(CL), *event_id = malloc(EV), *outcome = malloc(OUT);
    for (size_t i = 0; i < CL; i++)
        claimant[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < EV; i++)
        event_id[i] = (uint8_t)(i * 13 + 2);
    for (size_t i = 0; i < OUT; i++)
        outcome[i] = (uint8_t)(i * 31 + 3);
    ds_record r = {
        .state = DS_STATE_COMPLETED,
        .flags = DS_F_KNOWN,
        .attempts = 0xfedcba98u,
        .first_seen = INT64_MIN + 1,
        .until = INT64_MAX,
        .token = 0x7fffffffffffffffULL,
        .event_time = DS_NO_TIME,
        .other_events = UINT32_MAX,
        .claimant = claimant,
        .claimant_len = CL,
        .event_id = event_id,
        .event_id_len = EV,
        .outcome = outcome,
        .outcome_len = OUT,
    };
    for (int i = 0; i < 16; i++)
        r.intent[i] = (uint8_t)(0xa0 + i);

    size_t len;
    uint8_t *buf = encode(&r, &len);
    CHECK_EQ(len, (size_t)DS_RECORD_HEADER + CL + EV + OUT);
    ds_record d;
    memset(&d, 0xaa, sizeof d);
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_OK);
    check_record_eq(&r, &d, __LINE__);
    /* Decoded pointers alias the buffer, in order, right after the header. */
    CHECK(d.claimant == buf + DS_RECORD_HEADER);
    CHECK(d.event_id == buf + DS_RECORD_HEADER + CL);
    CHECK(d.outcome == buf + DS_RECORD_HEADER + CL + EV);
    free(buf);

    /* Another set of values: PENDING, no flags, empty variable parts, negative
     * and zero times. */
    ds_record z = {.state = DS_STATE_PENDING, .first_seen = -1, .until = 0, .token = 1, .event_time = 42};
    buf = encode(&z, &len);
    CHECK_EQ(len, DS_RECORD_HEADER);
    memset(&d, 0x55, sizeof d);
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_OK);
    check_record_eq(&z, &d, __LINE__);
    free(buf);

    /* Each flag on its own survives. */
    for (uint8_t f = 1; f <= DS_F_KNOWN; f++) {
        ds_record one = {.state = DS_STATE_PENDING, .flags = f};
        buf = encode(&one, &len);
        CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_OK);
        CHECK_EQ(d.flags, f);
        free(buf);
    }
    free(claimant);
    free(event_id);
    free(outcome);
}

static void test_record_layout(void)
{
    /* The on-disk layout is a versioned format: pin it byte for byte, so a
     * change to the codec cannot silently misread stores already written. */
    ds_record r = {
        .state = DS_STATE_PENDING,
        .flags = DS_F_INTENT | DS_F_ORIGIN_UNKNOWN,
        .attempts = 0x04030201u,
        .first_seen = 0x1112131415161718LL,
        .until = 0x2122232425262728LL,
        .token = 0x3132333435363738ULL,
        .event_time = -2,
        .other_events = 0x44434241u,
        .claimant = (const uint8_t *)"cl",
        .claimant_len = 2,
        .event_id = (const uint8_t *)"evt",
        .event_id_len = 3,
        .outcome = (const uint8_t *)"o",
        .outcome_len = 1,
    };
    for (int i = 0; i < 16; i++)
        r.intent[i] = (uint8_t)(0xc0 + i);
    static const uint8_t want[] = {
        0x01, 0x01, 0x03, 0x00,                         /* version, state, flags, reserved */
        0x01, 0x02, 0x03, 0x04,                         /* attempts (LE) */
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* first_seen */
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, /* until */
        0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31, /* token */
        0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, /* intent digest */
        0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* event_time = -2 */
        0x41, 0x42, 0x43, 0x44,                         /* other_events */
        0x02, 0x00, 0x03, 0x00,                         /* claimant_len, event_id_len (u16) */
        0x01, 0x00, 0x00, 0x00,                         /* outcome_len (u32) */
        'c', 'l', 'e', 'v', 't', 'o',
    };
    size_t len;
    uint8_t *buf = encode(&r, &len);
    CHECK_EQ(len, sizeof want);
    if (len == sizeof want)
        CHECK_MEM(buf, want, sizeof want);
    free(buf);
}

static void test_record_decode_rejects(void)
{
    ds_record r = {
        .state = DS_STATE_PENDING,
        .flags = DS_F_INTENT,
        .attempts = 1,
        .token = 99,
        .event_time = DS_NO_TIME,
        .claimant = (const uint8_t *)"worker",
        .claimant_len = 6,
        .event_id = (const uint8_t *)"e1",
        .event_id_len = 2,
        .outcome = (const uint8_t *)"out",
        .outcome_len = 3,
    };
    size_t len;
    uint8_t *good = encode(&r, &len);
    uint8_t *buf = malloc(len + 1);
    ds_record d;

    CHECK_EQ(ds_record_decode(good, len, &d), DS_REC_OK);

    /* Short: nothing at all, and a header cut anywhere. */
    CHECK_EQ(ds_record_decode(good, 0, &d), DS_REC_SHORT);
    CHECK_EQ(ds_record_decode(good, 1, &d), DS_REC_SHORT);
    CHECK_EQ(ds_record_decode(good, DS_RECORD_HEADER - 1, &d), DS_REC_SHORT);

    /* Version byte: anything but the one this build writes is refused as a version. */
    static const uint8_t versions[] = {0, 2, 0x7f, 0xff};
    for (size_t i = 0; i < COUNT(versions); i++) {
        memcpy(buf, good, len);
        buf[0] = versions[i];
        CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_VERSION);
        CHECK_EQ(ds_record_decode(buf, 5, &d), DS_REC_VERSION); /* even when short */
    }

    /* Unknown state. */
    static const uint8_t states[] = {0, 3, 0xff};
    for (size_t i = 0; i < COUNT(states); i++) {
        memcpy(buf, good, len);
        buf[1] = states[i];
        CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_CORRUPT);
    }

    /* Every flag bit this version does not define. */
    for (int bit = 0; bit < 8; bit++) {
        if ((1 << bit) & DS_F_KNOWN)
            continue;
        memcpy(buf, good, len);
        buf[2] = (uint8_t)(DS_F_INTENT | 1 << bit);
        CHECK_AT(ds_record_decode(buf, len, &d) == DS_REC_CORRUPT, __FILE__, __LINE__, "flag bit %d accepted",
                 bit);
    }

    /* Reserved byte must be zero. */
    memcpy(buf, good, len);
    buf[3] = 1;
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_CORRUPT);
    buf[3] = 0x80;
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_CORRUPT);

    /* Lengths that do not sum to the buffer size: buffer one longer or one
     * shorter than the fields say, and each length field one off either way. */
    memcpy(buf, good, len);
    buf[len] = 0;
    CHECK_EQ(ds_record_decode(buf, len + 1, &d), DS_REC_CORRUPT);
    CHECK_EQ(ds_record_decode(buf, len - 1, &d), DS_REC_CORRUPT);
    static const size_t len_fields[] = {60, 62, 64};
    for (size_t i = 0; i < COUNT(len_fields); i++) {
        for (int delta = -1; delta <= 1; delta += 2) {
            memcpy(buf, good, len);
            buf[len_fields[i]] = (uint8_t)(buf[len_fields[i]] + delta);
            CHECK_AT(ds_record_decode(buf, len, &d) == DS_REC_CORRUPT, __FILE__, __LINE__,
                     "length field at %zu off by %d accepted", len_fields[i], delta);
        }
    }
    /* Huge lengths must not wrap around to the buffer size. */
    memcpy(buf, good, len);
    memset(buf + 60, 0xff, 8);
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_CORRUPT);
    /* Moving bytes between length fields keeps the sum but is still decoded as
     * written (the codec cannot tell): it must at least stay inside the buffer. */
    memcpy(buf, good, len);
    buf[60] = 0;
    buf[62] = 8; /* claimant 0, event_id 8, outcome 3: same total */
    CHECK_EQ(ds_record_decode(buf, len, &d), DS_REC_OK);
    CHECK(d.event_id + d.event_id_len + d.outcome_len == buf + len);

    free(buf);
    free(good);
}

/* ------------------------------------------------------------------------ */
/* Decision table                                                            */

#define NOW 1700000000000000LL /* microseconds */
#define LEASE 30000000LL
#define FRESH 0x123456789abcdefULL
#define HELD 0x0fedcba987654321ULL

static const uint8_t INTENT_A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t INTENT_B[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17};

static ds_claim_req request(void)
{
    ds_claim_req q;
    memset(&q, 0, sizeof q);
    q.now = NOW;
    q.lease = LEASE;
    q.event_time = DS_NO_TIME;
    q.frontier = NOW - 3600000000LL;
    q.intent = INTENT_A;
    q.fresh_token = FRESH;
    return q;
}

/* A record created by an earlier NEW claim from "worker-1" that is still live. */
static ds_record pending_record(void)
{
    ds_record r;
    memset(&r, 0, sizeof r);
    r.state = DS_STATE_PENDING;
    r.flags = DS_F_INTENT;
    r.attempts = 1;
    r.first_seen = NOW - 1000;
    r.until = NOW + 5000;
    r.token = HELD;
    memcpy(r.intent, INTENT_A, 16);
    r.event_time = DS_NO_TIME;
    r.other_events = 3;
    r.claimant = (const uint8_t *)"worker-1";
    r.claimant_len = 8;
    r.event_id = (const uint8_t *)"evt-1";
    r.event_id_len = 5;
    return r;
}

static ds_record completed_record(void)
{
    ds_record r = pending_record();
    r.state = DS_STATE_COMPLETED;
    r.until = NOW - 500;
    r.outcome = (const uint8_t *)"done";
    r.outcome_len = 4;
    return r;
}

static void set_claimant(ds_claim_req *q, const char *c)
{
    q->claimant = (const uint8_t *)c;
    q->claimant_len = (uint32_t)strlen(c);
}

static void set_event_id(ds_claim_req *q, const char *e)
{
    q->event_id = (const uint8_t *)e;
    q->event_id_len = (uint32_t)strlen(e);
}

static void decide(const ds_record *cur, const ds_claim_req *q, ds_record *next, ds_claim_out *out)
{
    /* Poison the outputs so a field the decision forgets to set shows up. */
    memset(next, 0xa5, sizeof *next);
    memset(out, 0xa5, sizeof *out);
    ds_claim_decide(cur, q, next, out);
}

static void test_claim_absent(void)
{
    ds_claim_req q = request();
    ds_record next;
    ds_claim_out out;
    set_claimant(&q, "worker-1");
    set_event_id(&q, "evt-1");

    /* No record -> NEW with a fresh lease, and a complete first record. */
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    CHECK_EQ_U64(out.token, FRESH);
    CHECK_EQ(out.retry_after, 0);
    CHECK_EQ(out.other_event, 0);
    CHECK_EQ(next.state, DS_STATE_PENDING);
    CHECK_EQ(next.flags, DS_F_INTENT);
    CHECK_EQ(next.attempts, 1);
    CHECK_EQ(next.first_seen, NOW);
    CHECK_EQ(next.until, NOW + LEASE);
    CHECK_EQ_U64(next.token, FRESH);
    CHECK_MEM(next.intent, INTENT_A, 16);
    CHECK_EQ(next.event_time, DS_NO_TIME);
    CHECK_EQ(next.other_events, 0);
    CHECK(next.claimant_len == 8 && memcmp(next.claimant, "worker-1", 8) == 0);
    CHECK(next.event_id_len == 5 && memcmp(next.event_id, "evt-1", 5) == 0);
    CHECK_EQ(next.outcome_len, 0);

    /* Without an intent the record says "no intent check". */
    q.intent = NULL;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ(next.flags, 0);
    q.intent = INTENT_A;

    /* Without a claimant or event id the record carries none. */
    ds_claim_req bare = request();
    decide(NULL, &bare, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ(next.claimant_len, 0);
    CHECK_EQ(next.event_id_len, 0);

    /* event_time before the frontier: the record may have been evicted. */
    q.event_time = q.frontier - 1;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_BEYOND_HORIZON);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    CHECK_EQ_U64(out.token, FRESH);
    CHECK_EQ(next.state, DS_STATE_PENDING);
    CHECK_EQ(next.flags, DS_F_INTENT | DS_F_ORIGIN_BEYOND);
    CHECK_EQ(next.event_time, q.frontier - 1);
    CHECK_EQ(next.until, NOW + LEASE);
    CHECK_EQ(next.attempts, 1);

    /* ... far before it too, and without an intent. */
    q.event_time = INT64_MIN + 1;
    q.intent = NULL;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_BEYOND_HORIZON);
    CHECK_EQ(next.flags, DS_F_ORIGIN_BEYOND);
    q.intent = INTENT_A;

    /* event_time at or after the frontier: NEW. */
    q.event_time = q.frontier;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ(next.flags, DS_F_INTENT);
    CHECK_EQ(next.event_time, q.frontier);
    q.event_time = NOW + 1;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);

    /* No event_time answers on the evidence held, whatever the frontier (the
     * sentinel is INT64_MIN, which would otherwise compare below it). */
    q.event_time = DS_NO_TIME;
    q.frontier = INT64_MAX;
    decide(NULL, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ(next.flags, DS_F_INTENT);
}

static void test_claim_conflict(void)
{
    ds_record next;
    ds_claim_out out;
    ds_record curs[4];
    curs[0] = pending_record();                   /* live lease */
    curs[1] = completed_record();                 /* completed */
    curs[2] = pending_record();
    curs[2].until = NOW - 1;                      /* expired lease */
    curs[3] = pending_record();
    curs[3].flags |= DS_F_ORIGIN_BEYOND;          /* live, granted as BEYOND_HORIZON */

    for (size_t i = 0; i < COUNT(curs); i++) {
        /* Both intents set and different: CONFLICT whatever the state, even from
         * the lease holder itself and with another event id; nothing written. */
        ds_claim_req q = request();
        q.intent = INTENT_B;
        set_claimant(&q, "worker-1");
        set_event_id(&q, "evt-2");
        decide(&curs[i], &q, &next, &out);
        CHECK_AT(out.status == DS_CONFLICT, __FILE__, __LINE__, "case %zu: status %d", i, (int)out.status);
        CHECK_AT(out.write == DS_WRITE_NONE, __FILE__, __LINE__, "case %zu: write", i);
        CHECK_AT(out.token == 0, __FILE__, __LINE__, "case %zu: token", i);
        CHECK_AT(out.other_event == 0, __FILE__, __LINE__, "case %zu: other_event", i);
        CHECK_AT(out.retry_after == 0, __FILE__, __LINE__, "case %zu: retry_after", i);
    }

    /* Differing only in the last byte of the digest is a conflict. */
    ds_record cur = completed_record();
    ds_claim_req q = request();
    cur.intent[15] ^= 0x80;
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_CONFLICT);

    /* No conflict when either side has no intent. */
    cur = completed_record();
    q = request();
    q.intent = NULL;
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_DUPLICATE);

    cur = completed_record();
    cur.flags &= (uint8_t)~DS_F_INTENT; /* stored without an intent: its digest bytes mean nothing */
    memcpy(cur.intent, INTENT_B, 16);
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_DUPLICATE);

    cur = pending_record();
    cur.flags &= (uint8_t)~DS_F_INTENT;
    memcpy(cur.intent, INTENT_B, 16);
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_IN_PROGRESS);
}

static void test_claim_existing(void)
{
    ds_record cur, next;
    ds_claim_out out;
    ds_claim_req q;

    /* COMPLETED, same intent -> DUPLICATE, nothing written. */
    cur = completed_record();
    q = request();
    set_claimant(&q, "worker-9");
    set_event_id(&q, "evt-1");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_DUPLICATE);
    CHECK_EQ(out.write, DS_WRITE_NONE);
    CHECK_EQ(out.other_event, 0);
    CHECK_EQ(out.retry_after, 0);
    /* ... also when the completion's lease would still be "live" by the clock. */
    cur.until = NOW + LEASE;
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_DUPLICATE);
    CHECK_EQ(out.write, DS_WRITE_NONE);

    /* Live lease, another claimant (or none) -> IN_PROGRESS with retry_after. */
    static const char *others[] = {"worker-2", "worker-10", "worker-", ""};
    for (size_t i = 0; i < COUNT(others); i++) {
        cur = pending_record();
        q = request();
        set_claimant(&q, others[i]);
        decide(&cur, &q, &next, &out);
        CHECK_AT(out.status == DS_IN_PROGRESS, __FILE__, __LINE__, "claimant '%s': status %d", others[i],
                 (int)out.status);
        CHECK_EQ(out.retry_after, 5000);
        CHECK_EQ(out.write, DS_WRITE_NONE);
        CHECK_EQ(out.token, 0);
    }
    /* A holder without a claimant id cannot be matched by a caller without one. */
    cur = pending_record();
    cur.claimant = NULL;
    cur.claimant_len = 0;
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_IN_PROGRESS);
    CHECK_EQ(out.token, 0);
    /* One microsecond before expiry the lease is still live. */
    cur = pending_record();
    cur.until = NOW + 1;
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_IN_PROGRESS);
    CHECK_EQ(out.retry_after, 1);

    /* Live lease, same claimant -> the status it was granted as, same token, no write. */
    static const struct {
        uint8_t origin;
        ds_status status;
    } origins[] = {
        {0, DS_NEW},
        {DS_F_ORIGIN_UNKNOWN, DS_UNKNOWN},
        {DS_F_ORIGIN_BEYOND, DS_BEYOND_HORIZON},
    };
    for (size_t i = 0; i < COUNT(origins); i++) {
        cur = pending_record();
        cur.flags |= origins[i].origin;
        q = request();
        set_claimant(&q, "worker-1");
        set_event_id(&q, "evt-1");
        decide(&cur, &q, &next, &out);
        CHECK_AT(out.status == origins[i].status, __FILE__, __LINE__, "origin %u: status %d", origins[i].origin,
                 (int)out.status);
        CHECK_EQ_U64(out.token, HELD);
        CHECK_EQ(out.write, DS_WRITE_NONE);
        CHECK_EQ(out.retry_after, 0);
    }

    /* Expired lease (at and after `until`) -> UNKNOWN with a fresh fenced token. */
    static const int64_t expiries[] = {NOW, NOW - 1, NOW - LEASE * 100};
    for (size_t i = 0; i < COUNT(expiries); i++) {
        cur = pending_record();
        cur.until = expiries[i];
        cur.flags |= DS_F_ORIGIN_BEYOND; /* the old origin does not carry over */
        q = request();
        set_claimant(&q, "worker-2");
        set_event_id(&q, "evt-1");
        decide(&cur, &q, &next, &out);
        CHECK_EQ(out.status, DS_UNKNOWN);
        CHECK_EQ(out.write, DS_WRITE_PUT);
        CHECK_EQ_U64(out.token, FRESH);
        CHECK_EQ(out.other_event, 0);
        CHECK_EQ(next.state, DS_STATE_PENDING);
        CHECK_EQ(next.flags, DS_F_INTENT | DS_F_ORIGIN_UNKNOWN);
        CHECK_EQ(next.attempts, 2);
        CHECK_EQ(next.until, NOW + LEASE);
        CHECK_EQ_U64(next.token, FRESH);
        CHECK(next.claimant_len == 8 && memcmp(next.claimant, "worker-2", 8) == 0);
        /* The evidence stays: first sighting, intent, event id, repeat count. */
        CHECK_EQ(next.first_seen, cur.first_seen);
        CHECK_MEM(next.intent, INTENT_A, 16);
        CHECK(next.event_id_len == 5 && memcmp(next.event_id, "evt-1", 5) == 0);
        CHECK_EQ(next.other_events, 3);
    }
    /* The expired holder retrying with its own claimant id is not special: its
     * lease is gone, so it reconciles with a new token like anyone else. */
    cur = pending_record();
    cur.until = NOW;
    q = request();
    set_claimant(&q, "worker-1");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_UNKNOWN);
    CHECK_EQ_U64(out.token, FRESH);
    /* Without a claimant, the new record holds none. */
    cur = pending_record();
    cur.until = NOW;
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_UNKNOWN);
    CHECK_EQ(next.claimant_len, 0);
}

static void test_claim_other_event(void)
{
    ds_record cur, next;
    ds_claim_out out;
    ds_claim_req q;

    /* A repeat with a different event id is counted and written, whatever the
     * verdict; the rest of the record is unchanged (except what the verdict
     * itself changes). */
    cur = completed_record();
    q = request();
    set_event_id(&q, "evt-2");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_DUPLICATE);
    CHECK_EQ(out.other_event, 1);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    CHECK_EQ(next.other_events, 4);
    ds_record want = cur;
    want.other_events = 4;
    check_record_eq(&want, &next, __LINE__);
    CHECK(next.event_id_len == 5 && memcmp(next.event_id, "evt-1", 5) == 0); /* the first id is kept */

    cur = pending_record();
    q = request();
    set_event_id(&q, "evt-1x"); /* prefix of each other: still different */
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_IN_PROGRESS);
    CHECK_EQ(out.retry_after, 5000);
    CHECK_EQ(out.other_event, 1);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    want = cur;
    want.other_events = 4;
    check_record_eq(&want, &next, __LINE__);

    cur = pending_record();
    q = request();
    set_claimant(&q, "worker-1");
    set_event_id(&q, "evt-0");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_NEW);
    CHECK_EQ_U64(out.token, HELD);
    CHECK_EQ(out.other_event, 1);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    CHECK_EQ(next.other_events, 4);
    CHECK_EQ_U64(next.token, HELD);
    CHECK_EQ(next.until, cur.until);

    cur = pending_record();
    cur.until = NOW - 1;
    q = request();
    set_event_id(&q, "evt-2");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.status, DS_UNKNOWN);
    CHECK_EQ(out.other_event, 1);
    CHECK_EQ(out.write, DS_WRITE_PUT);
    CHECK_EQ(next.other_events, 4);
    CHECK_EQ(next.attempts, 2);

    /* Same event id, or an id missing on either side: not a different event. */
    cur = completed_record();
    q = request();
    set_event_id(&q, "evt-1");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.other_event, 0);
    CHECK_EQ(out.write, DS_WRITE_NONE);

    cur = completed_record();
    q = request();
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.other_event, 0);
    CHECK_EQ(out.write, DS_WRITE_NONE);

    cur = completed_record();
    cur.event_id = NULL;
    cur.event_id_len = 0;
    q = request();
    set_event_id(&q, "evt-2");
    decide(&cur, &q, &next, &out);
    CHECK_EQ(out.other_event, 0);
    CHECK_EQ(out.write, DS_WRITE_NONE);
}

static void test_complete(void)
{
    ds_record cur, next;
    const uint8_t *ok = (const uint8_t *)"ok";

    /* The holder completes: COMPLETED, origin flags cleared, outcome stored. */
    cur = pending_record();
    cur.flags |= DS_F_ORIGIN_UNKNOWN;
    memset(&next, 0xa5, sizeof next);
    CHECK_EQ(ds_complete_decide(&cur, HELD, ok, 2, NOW, &next), DS_OP_APPLY);
    CHECK_EQ(next.state, DS_STATE_COMPLETED);
    CHECK_EQ(next.flags, DS_F_INTENT);
    CHECK_EQ(next.until, NOW);
    CHECK_EQ_U64(next.token, HELD);
    CHECK(next.outcome_len == 2 && memcmp(next.outcome, "ok", 2) == 0);
    ds_record want = cur;
    want.state = DS_STATE_COMPLETED;
    want.flags = DS_F_INTENT;
    want.until = NOW;
    want.outcome = ok;
    want.outcome_len = 2;
    check_record_eq(&want, &next, __LINE__);

    /* A record without an intent stays without one. */
    cur = pending_record();
    cur.flags = DS_F_ORIGIN_BEYOND;
    CHECK_EQ(ds_complete_decide(&cur, HELD, NULL, 0, NOW, &next), DS_OP_APPLY);
    CHECK_EQ(next.flags, 0);
    CHECK_EQ(next.outcome_len, 0);

    /* After the lease ran out, the token still fences: nobody else was granted one. */
    cur = pending_record();
    cur.until = NOW - LEASE;
    CHECK_EQ(ds_complete_decide(&cur, HELD, ok, 2, NOW, &next), DS_OP_APPLY);
    CHECK_EQ(next.state, DS_STATE_COMPLETED);

    /* Repeating complete with the same token and outcome: success, no change. */
    cur = completed_record();
    CHECK_EQ(ds_complete_decide(&cur, HELD, (const uint8_t *)"done", 4, NOW, &next), DS_OP_NOOP);
    cur.outcome = NULL;
    cur.outcome_len = 0;
    CHECK_EQ(ds_complete_decide(&cur, HELD, NULL, 0, NOW, &next), DS_OP_NOOP);
    CHECK_EQ(ds_complete_decide(&cur, HELD, ok, 0, NOW, &next), DS_OP_NOOP);

    /* Same token, another outcome (content, length, or empty vs not). */
    cur = completed_record();
    CHECK_EQ(ds_complete_decide(&cur, HELD, (const uint8_t *)"dune", 4, NOW, &next), DS_OP_OUTCOME_DIFFERS);
    CHECK_EQ(ds_complete_decide(&cur, HELD, (const uint8_t *)"done!", 5, NOW, &next), DS_OP_OUTCOME_DIFFERS);
    CHECK_EQ(ds_complete_decide(&cur, HELD, (const uint8_t *)"don", 3, NOW, &next), DS_OP_OUTCOME_DIFFERS);
    CHECK_EQ(ds_complete_decide(&cur, HELD, NULL, 0, NOW, &next), DS_OP_OUTCOME_DIFFERS);

    /* Lease lost: wrong token, no record, completed under another token. */
    cur = pending_record();
    CHECK_EQ(ds_complete_decide(&cur, HELD + 1, ok, 2, NOW, &next), DS_OP_LEASE_LOST);
    CHECK_EQ(ds_complete_decide(&cur, 0, ok, 2, NOW, &next), DS_OP_LEASE_LOST);
    CHECK_EQ(ds_complete_decide(NULL, HELD, ok, 2, NOW, &next), DS_OP_LEASE_LOST);
    cur = completed_record();
    CHECK_EQ(ds_complete_decide(&cur, FRESH, (const uint8_t *)"done", 4, NOW, &next), DS_OP_LEASE_LOST);
    /* A lease that expired and was re-granted fences out the old token. */
    cur = pending_record();
    cur.until = NOW - 1;
    ds_claim_req q = request();
    ds_claim_out out;
    ds_record regranted;
    decide(&cur, &q, &regranted, &out);
    CHECK_EQ(out.status, DS_UNKNOWN);
    CHECK_EQ(ds_complete_decide(&regranted, HELD, ok, 2, NOW, &next), DS_OP_LEASE_LOST);
    CHECK_EQ(ds_complete_decide(&regranted, FRESH, ok, 2, NOW, &next), DS_OP_APPLY);
}

static void test_release_renew(void)
{
    ds_record cur, next;

    cur = pending_record();
    CHECK_EQ(ds_release_decide(&cur, HELD), DS_OP_APPLY);
    CHECK_EQ(ds_release_decide(&cur, HELD ^ 1), DS_OP_LEASE_LOST);
    CHECK_EQ(ds_release_decide(NULL, HELD), DS_OP_LEASE_LOST);
    cur.until = NOW - LEASE; /* expired but not re-granted: still the holder's */
    CHECK_EQ(ds_release_decide(&cur, HELD), DS_OP_APPLY);
    /* A completed record is never released, not even with its own token. */
    cur = completed_record();
    CHECK_EQ(ds_release_decide(&cur, HELD), DS_OP_LEASE_LOST);

    cur = pending_record();
    cur.flags |= DS_F_ORIGIN_UNKNOWN;
    memset(&next, 0xa5, sizeof next);
    CHECK_EQ(ds_renew_decide(&cur, HELD, NOW, 2 * LEASE, &next), DS_OP_APPLY);
    ds_record want = cur;
    want.until = NOW + 2 * LEASE;
    check_record_eq(&want, &next, __LINE__); /* only the expiry moves */
    cur.until = NOW - 1;
    CHECK_EQ(ds_renew_decide(&cur, HELD, NOW, LEASE, &next), DS_OP_APPLY);
    CHECK_EQ(next.until, NOW + LEASE);
    CHECK_EQ(ds_renew_decide(&cur, HELD + 1, NOW, LEASE, &next), DS_OP_LEASE_LOST);
    CHECK_EQ(ds_renew_decide(NULL, HELD, NOW, LEASE, &next), DS_OP_LEASE_LOST);
    cur = completed_record();
    CHECK_EQ(ds_renew_decide(&cur, HELD, NOW, LEASE, &next), DS_OP_LEASE_LOST);
}

/* ------------------------------------------------------------------------ */
/* Tokens                                                                    */

#define GOLDEN 0x9e3779b97f4a7c15ULL

/* splitmix64's output function and its inverse, to build generator states
 * whose next raw output is exactly a value the generator must skip. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t inverse_odd(uint64_t a)
{
    uint64_t x = a; /* correct to 3 bits; each Newton step doubles that */
    for (int i = 0; i < 5; i++)
        x *= 2 - a * x;
    return x;
}

static uint64_t unmix(uint64_t y)
{
    y ^= (y >> 31) ^ (y >> 62);
    y *= inverse_odd(0x94d049bb133111ebULL);
    y ^= (y >> 27) ^ (y >> 54);
    y *= inverse_odd(0xbf58476d1ce4e5b9ULL);
    y ^= (y >> 30) ^ (y >> 60);
    return y;
}

static void test_tokens(void)
{
    static const uint64_t seeds[] = {0, 1, UINT64_MAX, GOLDEN, 0x8000000000000000ULL};
    for (size_t s = 0; s < COUNT(seeds); s++) {
        uint64_t state = seeds[s];
        int ok = 1;
        uint64_t prev = 0;
        int repeats = 0;
        for (int i = 0; i < 200000; i++) {
            uint64_t t = ds_next_token(&state);
            if (t == 0 || t >= (1ULL << 63))
                ok = 0;
            if (t == prev)
                repeats++;
            prev = t;
        }
        CHECK_AT(ok, __FILE__, __LINE__, "seed 0x%016" PRIx64 ": a token was 0 or >= 2**63", seeds[s]);
        CHECK_EQ(repeats, 0);
    }

    /* The test's inverse is right (else the two cases below prove nothing). */
    static const uint64_t probes[] = {0, 1, 0x8000000000000000ULL, 0xdeadbeefcafef00dULL, UINT64_MAX};
    for (size_t i = 0; i < COUNT(probes); i++)
        CHECK_EQ_U64(mix(unmix(probes[i])), probes[i]);

    /* Raw outputs 0 and 2**63 both mask to 0: the generator must step past
     * them, to a valid token, in the same call. */
    static const uint64_t bad[] = {0, 0x8000000000000000ULL};
    for (size_t i = 0; i < COUNT(bad); i++) {
        uint64_t start = unmix(bad[i]) - GOLDEN;
        uint64_t state = start;
        uint64_t t = ds_next_token(&state);
        CHECK(t != 0);
        CHECK(t < (1ULL << 63));
        CHECK_EQ_U64(state, start + 2 * GOLDEN);
        CHECK_EQ_U64(t, mix(start + 2 * GOLDEN) & 0x7fffffffffffffffULL);
    }
}

int main(void)
{
    test_siphash_vectors();
    test_siphash_properties();
    test_crc32();
    test_table_hash();
    test_reduce();
    test_buf_limit();
    test_json_escaping();
    test_int_text();
    test_flat_object();
    test_record_roundtrip();
    test_record_layout();
    test_record_decode_rejects();
    test_claim_absent();
    test_claim_conflict();
    test_claim_existing();
    test_claim_other_event();
    test_complete();
    test_release_renew();
    test_tokens();
    return check_report();
}
