#include "ds_canon.h"

#include <stdlib.h>
#include <string.h>

void ds_buf_init(ds_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = limit;
    b->owned = 1;
}

void ds_buf_init_in(ds_buf *b, size_t limit, uint8_t *first, size_t cap)
{
    b->data = first;
    b->len = 0;
    b->cap = cap < limit ? cap : limit;
    b->limit = limit;
    b->owned = 0;
}

void ds_buf_free(ds_buf *b)
{
    if (b->owned)
        free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->owned = 1;
}

static int reserve(ds_buf *b, size_t extra)
{
    size_t need = b->len + extra;
    if (need < b->len || need > b->limit)
        return DS_BUF_TOO_LARGE;
    if (need <= b->cap)
        return DS_BUF_OK;
    size_t cap = b->cap ? b->cap : 128;
    while (cap < need)
        cap *= 2;
    if (cap > b->limit)
        cap = b->limit;
    uint8_t *p;
    if (b->owned) {
        p = realloc(b->data, cap);
    } else {
        /* Out of the caller's bytes: to the heap, with what they hold. */
        p = malloc(cap);
        if (p != NULL && b->len)
            memcpy(p, b->data, b->len);
    }
    if (p == NULL)
        return DS_BUF_NOMEM;
    b->data = p;
    b->cap = cap;
    b->owned = 1;
    return DS_BUF_OK;
}

int ds_buf_put(ds_buf *b, const void *data, size_t len)
{
    int rc = reserve(b, len);
    if (rc != DS_BUF_OK)
        return rc;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return DS_BUF_OK;
}

int ds_buf_put_byte(ds_buf *b, uint8_t c)
{
    /* cap never exceeds limit, so a byte that fits in cap is within it. */
    if (b->len >= b->cap) {
        int rc = reserve(b, 1);
        if (rc != DS_BUF_OK)
            return rc;
    }
    b->data[b->len++] = c;
    return DS_BUF_OK;
}

int ds_buf_put_json_string(ds_buf *b, const uint8_t *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    /* Reserve for the common case (nothing to escape) up front; escapes are
     * rare and each write below re-checks the limit anyway. */
    int rc = reserve(b, 2 + len);
    if (rc != DS_BUF_OK)
        return rc;
    b->data[b->len++] = '"'; /* reserved above */
    /* The common case first: bytes that need no escape, copied as they are
     * scanned into the room reserved above (a key or a currency code is a
     * few bytes, where a memcpy call per string costs more than the copy). */
    size_t i = 0;
    uint8_t *out = b->data + b->len;
    for (; i < len; i++) {
        uint8_t c = s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            break;
        out[i] = c;
    }
    b->len += i;
    if (i == len) {
        b->data[b->len++] = '"'; /* reserved above */
        return DS_BUF_OK;
    }
    size_t run = 0; /* bytes copied verbatim, flushed in one memcpy */
    for (; i < len; i++) {
        uint8_t c = s[i];
        char esc[6];
        size_t n = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            n = 2;
        } else if (c < 0x20) {
            esc[0] = '\\';
            n = 2;
            switch (c) {
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                n = 6;
            }
        } else {
            run++;
            continue;
        }
        if (run && (rc = ds_buf_put(b, s + i - run, run)) != DS_BUF_OK)
            return rc;
        run = 0;
        if ((rc = ds_buf_put(b, esc, n)) != DS_BUF_OK)
            return rc;
    }
    if (run && (rc = ds_buf_put(b, s + len - run, run)) != DS_BUF_OK)
        return rc;
    return ds_buf_put_byte(b, '"');
}
