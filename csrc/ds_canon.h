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

/* DS_BUF_INVALID: a ds_canon_field of no DS_FIELD_* kind. */
enum { DS_BUF_OK = 0, DS_BUF_TOO_LARGE = -1, DS_BUF_NOMEM = -2, DS_BUF_INVALID = -3 };

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
/* An integer in decimal, as int.__repr__ writes it. */
int ds_buf_put_int(ds_buf *b, long long v);

/* One member of a flat JSON object: a key and a scalar value, the strings
 * as UTF-8. */
enum { DS_FIELD_NULL = 0, DS_FIELD_TRUE, DS_FIELD_FALSE, DS_FIELD_INT, DS_FIELD_STRING };
typedef struct {
    const uint8_t *key;
    size_t klen;
    int kind;            /* DS_FIELD_* */
    const uint8_t *text; /* DS_FIELD_STRING's value */
    size_t tlen;
    long long num; /* DS_FIELD_INT's value */
    size_t kout, vout; /* set by ds_buf_put_flat_object: the bytes it writes for each */
} ds_canon_field;

/* A JSON object of ``n`` members with distinct keys, as the binding writes
 * any mapping: members in the byte order of their keys (a key before a
 * longer one it begins; ``fields`` is sorted so in place), no whitespace,
 * integers in decimal, strings as ds_buf_put_json_string writes them. All or
 * nothing: on an error nothing is written. A flat mapping (the common
 * intent) is one call instead of one per key and value; ``n`` is a handful
 * (the sort is an insertion sort). */
int ds_buf_put_flat_object(ds_buf *b, ds_canon_field *fields, size_t n);

#endif
