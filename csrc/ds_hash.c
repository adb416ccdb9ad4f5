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

/* Slicing-by-8: eight bytes a step through eight tables (table k maps a
 * byte to its CRC followed by k zero bytes), about 4x the byte-at-a-time
 * loop's speed for a write-behind record of a few hundred bytes. */
static uint32_t crc_table[8][256];
static atomic_int crc_ready;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = crc_table[0][crc_table[t - 1][n] & 0xFF] ^ (crc_table[t - 1][n] >> 8);
    }
    /* A racing first use computes the same tables again; the release store
     * makes them visible before the flag to any thread that sees it. */
    atomic_store_explicit(&crc_ready, 1, memory_order_release);
}

uint32_t ds_crc32(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    if (!atomic_load_explicit(&crc_ready, memory_order_acquire))
        crc_init();
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
