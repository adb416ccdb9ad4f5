/* A minimal assertion kit for the C engine's unit tests: no framework, so the
 * test program builds with nothing but a C compiler and the csrc/ sources.
 *
 * CHECK keeps going after a failure (one run reports every broken row of a
 * table), counts it, and names file:line; check_report() prints the summary
 * line tests/test_csrc.py parses and gives main() its exit status.
 */
#ifndef DS_TEST_CHECK_H
#define DS_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static unsigned long check_passed, check_failed;

#define CHECK_AT(cond, file, line, ...)                                                            \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: ", file, line);                                  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK(cond) CHECK_AT((cond), __FILE__, __LINE__, "%s", #cond)

/* Integer equality that prints both sides: most failures here are numbers. */
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        CHECK_AT(check_a_ == check_b_, __FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b,      \
                 check_a_, check_b_);                                                              \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                         \
    do {                                                                                           \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                               \
        CHECK_AT(check_a_ == check_b_, __FILE__, __LINE__,                                         \
                 "%s == %s (0x%016" PRIx64 " != 0x%016" PRIx64 ")", #a, #b, check_a_, check_b_);   \
    } while (0)

#define CHECK_MEM(a, b, n)                                                                         \
    CHECK_AT(memcmp((a), (b), (n)) == 0, __FILE__, __LINE__, "memcmp(%s, %s, %s) == 0", #a, #b, #n)

static int check_report(void)
{
    printf("%lu passed, %lu failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
