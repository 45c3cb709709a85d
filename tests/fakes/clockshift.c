/* clockshift: an LD_PRELOAD shim that shifts CLOCK_REALTIME for one process tree, to test what a
 * node whose clock is stepped does (containers and processes share the host's CLOCK_REALTIME:
 * time namespaces do not cover it).
 *
 * The offset, in milliseconds (signed), is read on every call from the file named by
 * MT_CLOCK_SHIFT_FILE (so a test can step it while the process runs; a missing or empty file is
 * 0), else from MT_CLOCK_SHIFT_MS. It shifts clock_gettime(CLOCK_REALTIME and its coarse
 * variant), gettimeofday() and time(), and the target of an absolute clock_nanosleep on
 * CLOCK_REALTIME; CLOCK_MONOTONIC and every other clock are left alone.
 *
 * CPython's time.time() and datetime.now() call clock_gettime(CLOCK_REALTIME) through libc's
 * dynamic symbol, so the shim reaches them. The real clock is read with the raw system call (not
 * the vDSO through libc), so the shim needs no dlsym and no glibc newer than the one it was built
 * on.
 *
 * Build: cc -O2 -shared -fPIC -o clockshift.so clockshift.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_ns(void)
{
    const char *path = getenv("MT_CLOCK_SHIFT_FILE");
    const char *text = getenv("MT_CLOCK_SHIFT_MS");
    char buf[32];
    if (path && *path) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        long n = (long)syscall(SYS_read, fd, buf, sizeof buf - 1);
        syscall(SYS_close, fd);
        if (n <= 0)
            return 0;
        buf[n] = '\0';
        text = buf;
    }
    if (!text || !*text)
        return 0;
    return strtoll(text, NULL, 10) * 1000000LL;
}

static int shifted(clockid_t id)
{
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

static void add_ns(struct timespec *ts, long long ns)
{
    long long total = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ns;
    ts->tv_sec = (time_t)(total / 1000000000LL);
    ts->tv_nsec = (long)(total % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && shifted(id))
        add_ns(ts, shift_ns());
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
    struct timespec target = *req;
    if (shifted(id) && (flags & TIMER_ABSTIME))
        add_ns(&target, -shift_ns());  /* the shifted clock's instant, on the real clock */
    if (syscall(SYS_clock_nanosleep, id, flags, &target, rem) != 0)
        return errno;  /* syscall() returns -1 with errno; clock_nanosleep returns the error */
    return 0;
}
