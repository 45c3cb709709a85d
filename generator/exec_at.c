/* market-timers-exec-at: wait for an instant of the realtime clock, then exec a program.
 *
 * usage: market-timers-exec-at [--nice N] EPOCH PROGRAM [ARG...]
 *   --nice N the nice value to set as the sleep ends (the runner's nice.py: the job's, when the
 *            runner is at the pre-fired unit's Nice=-10); without it the priority is left alone
 *            (a drop-in's Nice= is the job's)
 *   EPOCH    the instant: whole seconds since the Unix epoch (UTC)
 *   PROGRAM  the job: an absolute path, exec'd with ARG... and this process's environment
 *
 * The runner (market-timers-run, prefire.py) execs this once a pre-fired run is claimed and
 * locked, well before its instant; the lock's file descriptor and the pid (the unit's main
 * process) pass through both execs unchanged. Why a C program and not the runner's own wait:
 *  - clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME): an absolute deadline that follows a step
 *    of the clock, which Python 3.11 lacks (instant_wait.py loops on time.time() instead);
 *  - an exec from a small image is cheaper: on this project's VMs about 0.7 ms from here to
 *    the job's first instruction against 1.2-1.5 ms from the Python runner (the old image's
 *    teardown), and that exec is what lies between the instant and the job.
 * Like instant_wait.py it spins the last SPIN_NS instead of sleeping them (a sleeping task's
 * wake-up can come milliseconds late on a VM), and as its sleep ends it sets --nice N (the
 * pre-fired unit's Nice=-10 is for the wake-up; the job runs at the nice value it would have
 * without it), before the spin: lowering a running task's priority makes the kernel reschedule
 * it at once.
 *
 * For the job, and for bench/alternatives.py's per-fire attribution, it exports two variables
 * (contracts/environment.py): MARKET_EXEC_AT_WOKE, the realtime clock's reading that ended its
 * wait (SEC.NSEC: the first one at or past the instant), and MARKET_EXEC_AT_RUSAGE, its process's
 * "MINFLT MAJFLT NVCSW NIVCSW" (getrusage: the runner's and its own, since the unit started) just
 * before the exec, so that a job's own getrusage() minus these is the exec's share and its own.
 * Their buffers are put in the environment before the sleep: at the instant they are only
 * written (no allocation), at the cost of one getrusage().
 *
 * During the lead, before its sleep, it asks for the job's file to be read into the page cache
 * (prefetch): a job run once a day may have been evicted since, and a major fault in the exec at
 * the instant is a disk read. (Its timer slack is left alone: the sleep ends SPIN_NS early and
 * the spin covers the default 50 us; bench/alternatives.py measures instant -> end of the wait
 * at a few us.)
 *
 * It never execs before the instant, and refuses one it cannot represent (past year 2262). A
 * past instant execs at once. Just before the exec it sends WATCHDOG=1 when the unit has a
 * watchdog (notify_watchdog), so the wait never shortens the job's first interval. When the exec fails it
 * writes one line to stderr (read by journald with its priority) and exits 172, the runner's
 * own "could not exec the job" status (exitcodes.RUNNER_ERROR).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RUNNER_ERROR 172
#define NS 1000000000LL
#define SPIN_NS 5000000LL /* 5 ms: instant_wait.SPIN */

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "%smarket-timers-run: %s%s\n", getenv("JOURNAL_STREAM") ? "<3>" : "", what,
            detail);
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * NS + t.tv_nsec;
}

static void set_nice(int nice) {
    if (setpriority(PRIO_PROCESS, 0, nice) != 0) {
        char what[64];
        snprintf(what, sizeof what, "cannot return to nice %d: ", nice);
        fail(what, strerror(errno));
    }
}

/* WATCHDOG=1 to systemd as the job is exec'd: the unit started `lead` seconds early and the
 * wait counted against WatchdogSec=; the job's first interval is the whole of it. Only when the
 * unit has a watchdog (WATCHDOG_USEC); NotifyAccess=all lets this process send it (the runner
 * supervises it, or is it). A failure costs nothing but the reset. */
static void notify_watchdog(void) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!getenv("WATCHDOG_USEC") || !path || (path[0] != '/' && path[0] != '@'))
        return;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof addr.sun_path)
        return;
    memcpy(addr.sun_path, path, len);
    if (path[0] == '@')
        addr.sun_path[0] = '\0'; /* an abstract socket */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    static const char msg[] = "WATCHDOG=1";
    sendto(fd, msg, sizeof msg - 1, MSG_NOSIGNAL, (struct sockaddr *)&addr,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    close(fd);
}

/* MARKET_EXEC_AT_WOKE=SEC.NSEC and MARKET_EXEC_AT_RUSAGE=MINFLT MAJFLT NVCSW NIVCSW (the names:
 * contracts/environment.py). Static, put in the environment by reference (putenv) before the
 * wait, filled after it: no allocation at the instant. */
#define WOKE_VAR "MARKET_EXEC_AT_WOKE="
#define RUSAGE_VAR "MARKET_EXEC_AT_RUSAGE="
static char woke_env[sizeof WOKE_VAR + 32] = WOKE_VAR;
static char rusage_env[sizeof RUSAGE_VAR + 96] = RUSAGE_VAR;

static void export_woke(long long woke) {
    snprintf(woke_env + sizeof WOKE_VAR - 1, sizeof woke_env - (sizeof WOKE_VAR - 1),
             "%lld.%09lld", woke / NS, woke % NS);
}

static void export_rusage(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return;
    snprintf(rusage_env + sizeof RUSAGE_VAR - 1, sizeof rusage_env - (sizeof RUSAGE_VAR - 1),
             "%ld %ld %ld %ld", ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw);
}

/* Read the job's file into the page cache during the lead (asynchronous: posix_fadvise WILLNEED
 * starts the reads and returns). A file it cannot open or that is not a regular file is left to
 * the exec, which says what is wrong with it. */
static void prefetch(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    close(fd);
}

#define USAGE "usage: market-timers-exec-at [--nice N] EPOCH /PROGRAM [ARG...]"

int main(int argc, char **argv) {
    int first = 1, nice = 0, reniced = 1; /* reniced: nothing (more) to set */
    char *end;
    if (argc > 1 && strcmp(argv[1], "--nice") == 0) {
        if (argc < 3) {
            fail(USAGE, "");
            return RUNNER_ERROR;
        }
        errno = 0;
        long value = strtol(argv[2], &end, 10);
        if (errno != 0 || end == argv[2] || *end != '\0' || value < -20 || value > 19) {
            fail("market-timers-exec-at: not a nice value (-20 to 19): ", argv[2]);
            return RUNNER_ERROR;
        }
        nice = (int)value;
        reniced = 0;
        first = 3;
    }
    if (argc - first < 2 || argv[first + 1][0] != '/') {
        fail(USAGE, "");
        return RUNNER_ERROR;
    }
    errno = 0;
    long long epoch = strtoll(argv[first], &end, 10);
    /* epoch * NS must fit a long long: the largest instant is LLONG_MAX / NS (year 2262); a
     * larger one used to overflow into the past and exec at once. */
    if (errno != 0 || end == argv[first] || *end != '\0' || epoch < 0 || epoch > LLONG_MAX / NS) {
        fail("market-timers-exec-at: not an instant in whole seconds: ", argv[first]);
        return RUNNER_ERROR;
    }
    long long target = epoch * NS, now;
    prefetch(argv[first + 1]);
    putenv(woke_env); /* empty values until the wait ends */
    putenv(rusage_env);
    for (;;) {
        now = now_ns();
        long long left = target - now;
        if (left <= 0)
            break;
        if (left > SPIN_NS) { /* also after a step back of the clock during the spin */
            long long wake = target - SPIN_NS;
            struct timespec at = {.tv_sec = wake / NS, .tv_nsec = wake % NS};
            clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL); /* EINTR: loop */
        } else if (!reniced) {
            set_nice(nice);
            reniced = 1;
        }
    }
    export_woke(now);
    if (!reniced)
        set_nice(nice);
    char **job = argv + first + 1;
    notify_watchdog();
    export_rusage();
    execv(job[0], job);
    int e = errno;
    char what[4200];
    snprintf(what, sizeof what, "cannot run %s: ", job[0]);
    fail(what, strerror(e));
    return RUNNER_ERROR;
}
