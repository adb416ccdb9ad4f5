/* Little-endian loads and stores, byte by byte: every multi-byte integer the
 * engine writes to disk goes through these, so the format does not depend on
 * the host's byte order or alignment. */
#ifndef DS_BYTES_H
#define DS_BYTES_H

#include <stdint.h>

static inline uint64_t ds_load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline void ds_store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

#endif
