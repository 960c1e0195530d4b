/* Small files of a get written whole, a batch in one call.
 *
 * Creating a small file is a few short system calls (open, write, close,
 * rename). Made from Python, each gives up and takes back the interpreter's
 * lock, and a writer thread beside the thread reading the blocks waits for
 * the lock after nearly every one of them. Here a batch of files of one
 * directory is written in one foreign call, which holds no lock at all.
 *
 * Each file gets its name only once whole: made unnamed (O_TMPFILE) and
 * linked in (which fails if anything took the name), or, where the file
 * system does not offer that or an existing file is to be replaced, made
 * under a temporary name and renamed. Nothing is ever followed through a
 * symbolic link. The first failure stops the batch with nothing of that file
 * left; the caller writes that file again its own way, which reports it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

enum {
    WH_REPLACE = 1, /* a file already there under the name is replaced */
    WH_NAMED = 2,   /* unnamed files are not offered here: use temporary names */
};

static int write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The errors by which a kernel, a file system or a missing /proc says that
 * an unnamed file cannot be made or linked in: not a failure of the file. */
static int unnamed_not_offered(int err) {
    return err == EOPNOTSUPP || err == EISDIR || err == EINVAL || err == ENOENT;
}

/* 0, or -1 with errno; *offered is cleared when unnamed files are not offered. */
static int put_unnamed(int dir, const char *name, const char *data, size_t len, int *offered) {
    int fd = openat(dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) {
        if (unnamed_not_offered(errno))
            *offered = 0;
        return -1;
    }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int e;
    if (write_all(fd, data, len) != 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (linkat(AT_FDCWD, self, dir, name, AT_SYMLINK_FOLLOW) != 0) {
        e = errno;
        /* No /proc here, or a file system without hard links. */
        if (e == ENOENT || e == EPERM || e == EOPNOTSUPP || e == EXDEV || e == EMLINK)
            *offered = 0;
        close(fd);
        errno = e;
        return -1;
    }
    if (close(fd) != 0) { /* named, but perhaps not whole: not left so */
        e = errno;
        unlinkat(dir, name, 0);
        errno = e;
        return -1;
    }
    return 0;
}

/* 0; -2 if someone holds the temporary name; or -1 with errno. Nothing
 * made here is left under the temporary name. */
static int put_named(int dir, const char *tmp, const char *name, const char *data, size_t len,
                     int replace) {
    int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return errno == EEXIST ? -2 : -1;
    int e;
    if (write_all(fd, data, len) != 0) {
        e = errno;
        close(fd);
        goto failed;
    }
    if (close(fd) != 0) {
        e = errno;
        goto failed;
    }
    if (replace ? renameat(dir, tmp, dir, name) : renameat2(dir, tmp, dir, name, RENAME_NOREPLACE))
    {
        e = errno;
        goto failed;
    }
    return 0;
failed:
    unlinkat(dir, tmp, 0);
    errno = e;
    return -1;
}

/* Files names[i] holding datas[i] (lens[i] bytes) in directory ``dir``, in
 * order: how many were written before one failed (the caller writes that
 * one again itself, to report why). WH_NAMED is added to *flags once unnamed
 * files are found not offered (the caller keeps it for its next batches).
 * Temporary names are ``prefix`` and a number. */
long wh_write_files(int dir, const char *prefix, long n, const char *const *names,
                    const char *const *datas, const size_t *lens, int *flags) {
    char tmp[256];
    for (long i = 0; i < n; i++) {
        int offered = 1;
        if (!(*flags & (WH_NAMED | WH_REPLACE))) {
            if (put_unnamed(dir, names[i], datas[i], lens[i], &offered) == 0)
                continue;
            if (offered)
                return i;
            *flags |= WH_NAMED;
        }
        int made = -2;
        for (int attempt = 0; attempt < 100 && made == -2; attempt++) {
            /* A temporary name someone took is never reused: the next one. */
            snprintf(tmp, sizeof tmp, "%s%ld.%d", prefix, i, attempt);
            made = put_named(dir, tmp, names[i], datas[i], lens[i], *flags & WH_REPLACE);
        }
        if (made != 0)
            return i;
    }
    return n;
}
