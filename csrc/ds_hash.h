/* Keyed SipHash-2-4 with a 128-bit output: the only hash whose values reach disk
 * (ds_table_hash, below, is an in-memory table's).
 *
 * Every store has its own 16-byte secret (docs/format.md), so neither intent
 * digests nor partition routing can be steered by crafted keys or intents: a
 * collision would turn a conflicting intent into a DUPLICATE, which is the one
 * verdict we must never get wrong silently.
 */
#ifndef DS_HASH_H
#define DS_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t k0, k1;
} ds_hash_key;

/* Load a 16-byte secret (little-endian halves, as in the SipHash paper). */
void ds_hash_key_init(ds_hash_key *key, const uint8_t secret[16]);

/* SipHash-2-4, 128-bit output variant, written little-endian into out. */
void ds_siphash128(const ds_hash_key *key, const void *data, size_t len, uint8_t out[16]);

/* SipHash-2-4, 64-bit output variant. */
uint64_t ds_siphash64(const ds_hash_key *key, const void *data, size_t len);

/* Map a hash onto [0, n) by multiply-shift of its high 32 bits (no division,
 * no modulo bias worth caring about for the partition counts we allow). */
static inline uint32_t ds_reduce(uint64_t h, uint32_t n)
{
    return (uint32_t)(((h >> 32) * (uint64_t)n) >> 32);
}

/* The hash of an in-memory table's keys (the write-behind overlay's maps):
 * never stored, so free to differ between processes and versions. Seeded
 * (each process draws its seed at random), so that keys cannot be crafted to
 * collide in a table they do not know the seed of; a multiply-mix of 8-byte
 * words, a few instructions a word where SipHash takes a few dozen. */
static inline uint64_t ds_mum(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t ds_table_hash(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)data;
    uint64_t h = seed ^ ((uint64_t)len * 0x9E3779B97F4A7C15ull);
    uint64_t w = 0;
    size_t n = len;
    while (n > 8) {
        memcpy(&w, p, 8);
        h = ds_mum(h ^ w, 0xA0761D6478BD642Full);
        p += 8;
        n -= 8;
    }
    if (len >= 8) {
        memcpy(&w, (const uint8_t *)data + len - 8, 8); /* the last word, overlapping the one before */
    } else {
        w = 0;
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)p[i] << (8 * i);
    }
    h = ds_mum(h ^ w, 0xE7037ED1A0B428DBull);
    return ds_mum(h, 0x8EBC6AF09C88C6E3ull);
}

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): the journal's and the
 * write-behind log's record checksum. Chains like zlib: pass 0 first, then the
 * previous result. Not a keyed hash: it detects torn writes, not tampering. */
uint32_t ds_crc32(uint32_t crc, const void *data, size_t len);

/* The same CRC by the tables alone, whatever the CPU (for tests and
 * benchmarks: ds_crc32 multiplies carry-less where it can). */
uint32_t ds_crc32_tables(uint32_t crc, const void *data, size_t len);

/* 1 when ds_crc32 uses the CPU's carry-less multiplication (x86-64's
 * PCLMULQDQ), 0 when it uses the tables. */
int ds_crc32_multiplies(void);

#endif
