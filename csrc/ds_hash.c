#include "ds_hash.h"

#include "ds_bytes.h"

#include <stdatomic.h>
#include <string.h>

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);                                  \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                                                     \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                                                     \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);                                  \
    } while (0)

void ds_hash_key_init(ds_hash_key *key, const uint8_t secret[16])
{
    key->k0 = ds_load_le64(secret);
    key->k1 = ds_load_le64(secret + 8);
}

/* One body for both output widths: wide selects the 128-bit finalisation. */
static void siphash(const ds_hash_key *key, const uint8_t *in, size_t len, int wide, uint8_t *out)
{
    uint64_t v0 = 0x736f6d6570736575ULL ^ key->k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ key->k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key->k0;
    uint64_t v3 = 0x7465646279746573ULL ^ key->k1;
    const uint8_t *end = in + len - (len % 8);
    uint64_t b = ((uint64_t)len) << 56;
    uint64_t m;

    if (wide)
        v1 ^= 0xee;
    for (; in != end; in += 8) {
        m = ds_load_le64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    switch (len & 7) {
    case 7: b |= ((uint64_t)in[6]) << 48; /* fall through */
    case 6: b |= ((uint64_t)in[5]) << 40; /* fall through */
    case 5: b |= ((uint64_t)in[4]) << 32; /* fall through */
    case 4: b |= ((uint64_t)in[3]) << 24; /* fall through */
    case 3: b |= ((uint64_t)in[2]) << 16; /* fall through */
    case 2: b |= ((uint64_t)in[1]) << 8;  /* fall through */
    case 1: b |= ((uint64_t)in[0]); break;
    case 0: break;
    }
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= wide ? 0xee : 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    ds_store_le64(out, v0 ^ v1 ^ v2 ^ v3);
    if (!wide)
        return;
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    ds_store_le64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

void ds_siphash128(const ds_hash_key *key, const void *data, size_t len, uint8_t out[16])
{
    siphash(key, (const uint8_t *)data, len, 1, out);
}

uint64_t ds_siphash64(const ds_hash_key *key, const void *data, size_t len)
{
    uint8_t out[8];
    siphash(key, (const uint8_t *)data, len, 0, out);
    return ds_load_le64(out);
}

/* CRC-32 two ways, one result.
 *
 * Tables, slicing-by-8: eight bytes a step through eight tables (table k
 * maps a byte to its CRC followed by k zero bytes), about 4x the
 * byte-at-a-time loop's speed. But the tables are 8 KiB: a cold call (a
 * consumer's, after its sleep) fetched about 90 of their 64-byte lines from
 * memory for a round's two log records (benches/bench_instructions.py
 * --cold), more than any other function of the package's.
 *
 * Carry-less multiplication (x86-64's PCLMULQDQ, where the CPU has it):
 * the message folded 16 bytes a step into a 128-bit remainder by
 * multiplying by constants x^n mod P, then reduced to 32 bits by Barrett's
 * method; no tables. The method and its constants are those of Intel's
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Gopal et al., 2009) for the reflected polynomial 0xEDB88320.
 * What is left under 16 bytes after that goes half a byte at a time
 * through a 16-entry table (crc_nibbles), one cache line: byte by byte
 * through the first of the tables above (1 KiB, sixteen lines), a journal
 * record's tail cost a call after an idle wait a cache miss per byte, each
 * lookup waiting for the one before. */
static uint32_t crc_table[8][256];
static _Alignas(64) uint32_t crc_nibble[16];
/* 0: not set up; 1: the tables; 2: the tables and carry-less multiplication. */
static atomic_int crc_way;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DS_CRC_CLMUL 1
#include <immintrin.h>
#else
#define DS_CRC_CLMUL 0
#endif

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 16; n++) {
        uint32_t c = n;
        for (int k = 0; k < 4; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_nibble[n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = crc_table[0][crc_table[t - 1][n] & 0xFF] ^ (crc_table[t - 1][n] >> 8);
    }
    int way = 1;
#if DS_CRC_CLMUL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"))
        way = 2;
#endif
    /* A racing first use computes the same tables again; the release store
     * makes them visible before the flag to any thread that sees it. */
    atomic_store_explicit(&crc_way, way, memory_order_release);
}

static int crc_ready(void)
{
    int way = atomic_load_explicit(&crc_way, memory_order_acquire);
    if (way)
        return way;
    crc_init();
    return atomic_load_explicit(&crc_way, memory_order_acquire);
}

/* The steps below take and give the CRC's register, inverted (~crc). */
static uint32_t crc_bytes(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

static uint32_t crc_slices(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    return crc_bytes(crc, p, len);
}

#if DS_CRC_CLMUL
#define DS_CLMUL __attribute__((target("pclmul,sse4.1")))

static uint32_t crc_nibbles(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len--) {
        crc ^= *p++;
        crc = crc_nibble[crc & 15] ^ (crc >> 4);
        crc = crc_nibble[crc & 15] ^ (crc >> 4);
    }
    return crc;
}

/* x times k's two halves (x's low by k's low, x's high by k's high), plus
 * the next 16 bytes: x folded 128 bits further along the message. */
DS_CLMUL static inline __m128i crc_fold(__m128i x, __m128i k, const uint8_t *next)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), _mm_loadu_si128((const __m128i *)next));
}

/* len: a multiple of 16, at least 16. */
DS_CLMUL static uint32_t crc_clmul(uint32_t crc, const uint8_t *p, size_t len)
{
    /* x^(4*128+32) and x^(4*128-32) mod P: a lane folded over four; the
     * same for one lane (x^(128+32), x^(128-32)); x^64 mod P; then P and
     * Barrett's mu = x^64 / P, all bit-reflected. */
    const __m128i by4 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i by1 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i x64 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i pmu = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)crc));
    p += 16;
    len -= 16;
    if (len >= 48) { /* four lanes, 64 bytes a step */
        __m128i x2 = _mm_loadu_si128((const __m128i *)p);
        __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 32));
        p += 48;
        len -= 48;
        for (; len >= 64; p += 64, len -= 64) {
            x1 = crc_fold(x1, by4, p);
            x2 = crc_fold(x2, by4, p + 16);
            x3 = crc_fold(x3, by4, p + 32);
            x4 = crc_fold(x4, by4, p + 48);
        }
        /* The four lanes into one. */
        __m128i lo = _mm_clmulepi64_si128(x1, by1, 0x00), hi = _mm_clmulepi64_si128(x1, by1, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(lo, hi), x2);
        lo = _mm_clmulepi64_si128(x1, by1, 0x00);
        hi = _mm_clmulepi64_si128(x1, by1, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(lo, hi), x3);
        lo = _mm_clmulepi64_si128(x1, by1, 0x00);
        hi = _mm_clmulepi64_si128(x1, by1, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(lo, hi), x4);
    }
    for (; len >= 16; p += 16, len -= 16)
        x1 = crc_fold(x1, by1, p);
    /* 128 bits to 64. */
    __m128i x2 = _mm_clmulepi64_si128(x1, by1, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), x64, 0x00), x2);
    /* Barrett: 64 bits to 32. */
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), pmu, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), pmu, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

uint32_t ds_crc32(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    int way = crc_ready();
    crc = ~crc;
#if DS_CRC_CLMUL
    if (way == 2 && len >= 16) {
        size_t body = len & ~(size_t)15;
        return ~crc_nibbles(crc_clmul(crc, p, body), p + body, len - body);
    }
#endif
    (void)way;
    return ~crc_slices(crc, p, len);
}

uint32_t ds_crc32_tables(uint32_t crc, const void *data, size_t len)
{
    crc_ready();
    return ~crc_slices(~crc, data, len);
}

int ds_crc32_multiplies(void)
{
    return crc_ready() == 2;
}
