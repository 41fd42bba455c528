/* faultshim: an LD_PRELOAD library that makes writes and syncs of files under one directory fail.
 *
 *   FAULTSHIM_DIR=/path/to/data   only files whose path starts with this are affected
 *   FAULTSHIM_OUT=/path/count     where SIGRTMIN+4 writes "<injected faults>\n"
 *   FAULTSHIM_PERCENT=50          with faults on, fail this share of the affected calls (default 100), so
 *                                 that a commit can fail after some of its writes went through
 *   FAULTSHIM_LIMIT=4194304       a filesystem of fixed size, always on: a write that would make a file under
 *                                 the directory longer than this many bytes fails with ENOSPC (writes inside
 *                                 a file's current length go through, as blocks already allocated do)
 *
 * Signals switch the mode at run time (Python leaves real-time signals alone):
 *   SIGRTMIN+1  fail with EIO      SIGRTMIN+2  fail with ENOSPC      SIGRTMIN+3  no faults
 *   SIGRTMIN+4  write the count of injected faults to FAULTSHIM_OUT
 * Affected calls: write, pwrite, pwrite64, writev, pwritev, fsync, fdatasync, sync_file_range, msync is not
 * (the sidecar does not use a writable memory map). With no faults on, every call goes straight through.
 * Written for the sidecar's fault-loop test (tests/test_faults.py); built there with the C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_int mode;            /* 0: off, else the errno to fail with */
static atomic_long injected;
static char dir[PATH_MAX];
static size_t dir_len;
static char out_path[PATH_MAX];
static int percent = 100;
static long long limit;
static atomic_uint rng = 2463534242u;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned int);

static void report(int sig) {
    (void)sig;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", atomic_load(&injected));
    int fd = (int)syscall(SYS_openat, AT_FDCWD, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        syscall(SYS_write, fd, buf, (size_t)n);
        syscall(SYS_close, fd);
    }
}

static void set_mode(int sig) {
    if (sig == SIGRTMIN + 1) atomic_store(&mode, EIO);
    else if (sig == SIGRTMIN + 2) atomic_store(&mode, ENOSPC);
    else atomic_store(&mode, 0);
}

__attribute__((constructor)) static void init(void) {
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_sync_file_range = dlsym(RTLD_NEXT, "sync_file_range");
    const char *d = getenv("FAULTSHIM_DIR");
    if (d) {
        strncpy(dir, d, sizeof dir - 1);
        dir_len = strlen(dir);
    }
    const char *o = getenv("FAULTSHIM_OUT");
    if (o) strncpy(out_path, o, sizeof out_path - 1);
    const char *l = getenv("FAULTSHIM_LIMIT");
    if (l) limit = atoll(l);
    const char *p = getenv("FAULTSHIM_PERCENT");
    if (p) percent = atoi(p);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = set_mode;
    sigaction(SIGRTMIN + 1, &sa, NULL);
    sigaction(SIGRTMIN + 2, &sa, NULL);
    sigaction(SIGRTMIN + 3, &sa, NULL);
    sa.sa_handler = report;
    sigaction(SIGRTMIN + 4, &sa, NULL);
}

/* errno to fail this call on fd with, or 0 */
static int fault(int fd) {
    int m = atomic_load(&mode);
    if (!m || !dir_len || fd < 0) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    if ((size_t)n < dir_len || strncmp(path, dir, dir_len) != 0) return 0;
    if (percent < 100) {  /* xorshift32, shared by the threads (a lost update only changes the draw) */
        unsigned x = atomic_load(&rng);
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        atomic_store(&rng, x);
        if ((int)(x % 100) >= percent) return 0;
    }
    atomic_fetch_add(&injected, 1);
    return m;
}

#define FAIL_IF(fd) do { int e_ = fault(fd); if (e_) { errno = e_; return -1; } } while (0)

static int in_dir(int fd) {
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return dir_len && (size_t)n >= dir_len && strncmp(path, dir, dir_len) == 0;
}

/* ENOSPC if writing [off, off + n) would grow a file under the directory past the limit */
static int full(int fd, long long off, size_t n) {
    if (!limit || fd < 0) return 0;
    if (off < 0) off = lseek(fd, 0, SEEK_CUR);
    long long end = off + (long long)n;
    if (end <= limit) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || end <= st.st_size) return 0;
    if (!in_dir(fd)) return 0;
    atomic_fetch_add(&injected, 1);
    return ENOSPC;
}

static size_t iov_len(const struct iovec *v, int c) {
    size_t t = 0;
    for (int i = 0; i < c; i++) t += v[i].iov_len;
    return t;
}

#define FULL_IF(fd, off, n) do { int e_ = full(fd, off, n); if (e_) { errno = e_; return -1; } } while (0)

ssize_t write(int fd, const void *b, size_t n) { FAIL_IF(fd); FULL_IF(fd, -1, n); return real_write(fd, b, n); }
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) { FAIL_IF(fd); FULL_IF(fd, o, n); return real_pwrite(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) { FAIL_IF(fd); FULL_IF(fd, o, n); return real_pwrite64(fd, b, n, o); }
ssize_t writev(int fd, const struct iovec *v, int c) { FAIL_IF(fd); FULL_IF(fd, -1, iov_len(v, c)); return real_writev(fd, v, c); }
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t o) { FAIL_IF(fd); FULL_IF(fd, o, iov_len(v, c)); return real_pwritev(fd, v, c, o); }
int fsync(int fd) { FAIL_IF(fd); return real_fsync(fd); }
int fdatasync(int fd) { FAIL_IF(fd); return real_fdatasync(fd); }
int sync_file_range(int fd, off_t o, off_t n, unsigned int f) { FAIL_IF(fd); return real_sync_file_range(fd, o, n, f); }
