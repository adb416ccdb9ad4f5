/* A fresh temporary file for the C unit tests that write files (test_gsync.c,
 * test_log.c): in $TMPDIR, or /tmp; the caller unlinks ``path``. Include it
 * after defining _POSIX_C_SOURCE (mkstemp). */
#ifndef DS_TEST_TEMPFILE_H
#define DS_TEST_TEMPFILE_H

#include <stdio.h>
#include <stdlib.h>

static inline int temp_file(char *path, size_t size, const char *stem)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, size, "%s/%s_XXXXXX", dir && *dir ? dir : "/tmp", stem);
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    return fd;
}

#endif
