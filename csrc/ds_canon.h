/* The canonical byte form of an intent, built incrementally.
 *
 * The binding walks the caller's object; this file owns the bytes: the tag that
 * keeps raw and structured intents apart, JSON string escaping, and the size
 * limit. Keeping the byte rules in C keeps them in one place that the C unit
 * tests pin down (docs/format.md, "Canonical intent").
 */
#ifndef DS_CANON_H
#define DS_CANON_H

#include <stddef.h>
#include <stdint.h>

#define DS_CANON_TAG_RAW 0x00        /* bytes, or str as UTF-8 */
#define DS_CANON_TAG_STRUCTURED 0x01 /* canonical JSON of a mapping or list */

typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t limit; /* the most bytes the canonical form may take */
    int owned;    /* data is this buffer's allocation (not the caller's) */
} ds_buf;

enum { DS_BUF_OK = 0, DS_BUF_TOO_LARGE = -1, DS_BUF_NOMEM = -2 };

void ds_buf_init(ds_buf *b, size_t limit);
/* As ds_buf_init, writing into the caller's ``cap`` bytes at ``first`` (a
 * stack array, say) until they are full; only then is memory allocated
 * (and the bytes so far copied). ds_buf_free frees only what it allocated. */
void ds_buf_init_in(ds_buf *b, size_t limit, uint8_t *first, size_t cap);
void ds_buf_free(ds_buf *b);
int ds_buf_put(ds_buf *b, const void *data, size_t len);
int ds_buf_put_byte(ds_buf *b, uint8_t c);
/* A JSON string literal: quotes, the two mandatory escapes, control characters
 * as \u00XX (short forms for \b \f \n \r \t), everything else as given (UTF-8). */
int ds_buf_put_json_string(ds_buf *b, const uint8_t *utf8, size_t len);

#endif
