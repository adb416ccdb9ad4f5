#include "ds_canon.h"

#include <assert.h>
#include <stdint.h>
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

/* The bytes JSON adds to byte ``c`` of a string when it escapes it: 0 (as it
 * is), 1 (\" \\ \b \f \n \r \t) or 5 (any other control character, as
 * \u00XX). Bytes from 0x80 (UTF-8 past ASCII) are all 0. */
static const uint8_t ESC_EXTRA[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5,
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The most bytes a string may have for its literal's length (6 a byte at
 * most, and the quotes) to be counted in a size_t. */
#define JSON_MAX_INPUT ((SIZE_MAX - 2) / 6)

/* The length of the string literal of ``s``, quotes included (len at most
 * JSON_MAX_INPUT). */
static size_t json_len(const uint8_t *s, size_t len)
{
    size_t n = len + 2;
    for (size_t i = 0; i < len; i++)
        n += ESC_EXTRA[s[i]];
    return n;
}

/* The string literal of ``s`` (``n`` bytes: its json_len) written at ``out``;
 * returns where it ends. The room is the caller's to have reserved. */
static uint8_t *json_write(uint8_t *out, const uint8_t *s, size_t len, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    *out++ = '"';
    if (n == len + 2) { /* nothing to escape: nearly always */
        memcpy(out, s, len);
        out += len;
        *out++ = '"';
        return out;
    }
    for (size_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        switch (ESC_EXTRA[c]) {
        case 0:
            *out++ = c;
            break;
        case 1:
            *out++ = '\\';
            switch (c) {
            case '\b': *out++ = 'b'; break;
            case '\f': *out++ = 'f'; break;
            case '\n': *out++ = 'n'; break;
            case '\r': *out++ = 'r'; break;
            case '\t': *out++ = 't'; break;
            default: *out++ = c; /* " or \ */
            }
            break;
        default:
            memcpy(out, "\\u00", 4);
            out[4] = (uint8_t)hex[c >> 4];
            out[5] = (uint8_t)hex[c & 15];
            out += 6;
        }
    }
    *out++ = '"';
    return out;
}

int ds_buf_put_json_string(ds_buf *b, const uint8_t *s, size_t len)
{
    if (len > JSON_MAX_INPUT)
        return DS_BUF_TOO_LARGE;
    size_t n = json_len(s, len);
    int rc = reserve(b, n);
    if (rc != DS_BUF_OK)
        return rc;
    json_write(b->data + b->len, s, len, n);
    b->len += n;
    return DS_BUF_OK;
}

/* The magnitude of ``v`` as unsigned: -LLONG_MIN does not fit in a long long. */
static unsigned long long magnitude(long long v)
{
    return v < 0 ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
}

/* The length of ``v``'s decimal text (int.__repr__'s). */
static size_t int_len(long long v)
{
    unsigned long long u = magnitude(v);
    size_t n = v < 0 ? 2 : 1;
    for (; u >= 10; u /= 10)
        n++;
    return n;
}

/* ``v``'s decimal text (``n`` bytes: its int_len) written at ``out``;
 * returns where it ends. */
static uint8_t *int_write(uint8_t *out, long long v, size_t n)
{
    unsigned long long u = magnitude(v);
    uint8_t *p = out + n;
    do {
        *--p = (uint8_t)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return out + n;
}

int ds_buf_put_int(ds_buf *b, long long v)
{
    size_t n = int_len(v);
    int rc = reserve(b, n);
    if (rc != DS_BUF_OK)
        return rc;
    int_write(b->data + b->len, v, n);
    b->len += n;
    return DS_BUF_OK;
}

static int key_order(const ds_canon_field *a, const ds_canon_field *b)
{
    int c = memcmp(a->key, b->key, a->klen < b->klen ? a->klen : b->klen);
    if (c)
        return c;
    return a->klen < b->klen ? -1 : a->klen > b->klen;
}

/* The bytes a member's value takes; 0 for a kind that is not one. */
static size_t value_len(const ds_canon_field *f)
{
    switch (f->kind) {
    case DS_FIELD_NULL:
    case DS_FIELD_TRUE:
        return 4;
    case DS_FIELD_FALSE:
        return 5;
    case DS_FIELD_INT:
        return int_len(f->num);
    case DS_FIELD_STRING:
        return json_len(f->text, f->tlen);
    default:
        return 0;
    }
}

int ds_buf_put_flat_object(ds_buf *b, ds_canon_field *f, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        ds_canon_field x = f[i];
        size_t j = i;
        for (; j > 0 && key_order(&f[j - 1], &x) > 0; j--)
            f[j] = f[j - 1];
        f[j] = x;
    }
    /* The whole length first: one reservation, then writes that cannot fail. */
    size_t total = n ? n + 1 : 2; /* braces and commas */
    for (size_t i = 0; i < n; i++) {
        if (f[i].klen > JSON_MAX_INPUT || (f[i].kind == DS_FIELD_STRING && f[i].tlen > JSON_MAX_INPUT))
            return DS_BUF_TOO_LARGE;
        f[i].vout = value_len(&f[i]);
        if (f[i].vout == 0)
            return DS_BUF_INVALID;
        f[i].kout = json_len(f[i].key, f[i].klen);
        /* The sum checked before it could wrap (keys and texts larger than memory). */
        if (f[i].kout >= SIZE_MAX - total || f[i].vout > SIZE_MAX - total - f[i].kout - 1)
            return DS_BUF_TOO_LARGE;
        total += f[i].kout + 1 + f[i].vout;
    }
    int rc = reserve(b, total);
    if (rc != DS_BUF_OK)
        return rc;
    uint8_t *out = b->data + b->len;
    *out++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *out++ = ',';
        out = json_write(out, f[i].key, f[i].klen, f[i].kout);
        *out++ = ':';
        switch (f[i].kind) {
        case DS_FIELD_NULL:
            memcpy(out, "null", 4);
            break;
        case DS_FIELD_TRUE:
            memcpy(out, "true", 4);
            break;
        case DS_FIELD_FALSE:
            memcpy(out, "false", 5);
            break;
        case DS_FIELD_INT:
            int_write(out, f[i].num, f[i].vout);
            break;
        default: /* DS_FIELD_STRING: value_len() let no other kind through */
            json_write(out, f[i].text, f[i].tlen, f[i].vout);
        }
        out += f[i].vout;
    }
    *out++ = '}';
    assert((size_t)(out - (b->data + b->len)) == total);
    b->len += total;
    return DS_BUF_OK;
}
