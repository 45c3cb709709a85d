/* market-timers-exec-at: wait for an instant of the realtime clock, then exec a program.
 *
 * usage: market-timers-exec-at EPOCH PROGRAM [ARG...]
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
 * wake-up can come milliseconds late on a VM), and as its sleep ends it returns to nice 0
 * (the pre-fired unit's Nice=-10 is for the wake-up; the job runs at nice 0), before the spin:
 * lowering a running task's priority makes the kernel reschedule it at once.
 *
 * It never execs before the instant. A past instant execs at once. When the exec fails it
 * writes one line to stderr (read by journald with its priority) and exits 172, the runner's
 * own "could not exec the job" status (exitcodes.RUNNER_ERROR).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static void normal_priority(void) {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    if (errno == 0 && nice < 0 && setpriority(PRIO_PROCESS, 0, 0) != 0)
        fail("cannot return to nice 0: ", strerror(errno));
}

int main(int argc, char **argv) {
    if (argc < 3 || argv[2][0] != '/') {
        fail("usage: market-timers-exec-at EPOCH /PROGRAM [ARG...]", "");
        return RUNNER_ERROR;
    }
    char *end;
    errno = 0;
    long long epoch = strtoll(argv[1], &end, 10);
    if (errno != 0 || end == argv[1] || *end != '\0' || epoch < 0 || epoch > (1LL << 34)) {
        fail("market-timers-exec-at: not an instant in whole seconds: ", argv[1]);
        return RUNNER_ERROR;
    }
    long long target = epoch * NS;
    int reniced = 0;
    for (;;) {
        long long left = target - now_ns();
        if (left <= 0)
            break;
        if (left > SPIN_NS) { /* also after a step back of the clock during the spin */
            long long wake = target - SPIN_NS;
            struct timespec at = {.tv_sec = wake / NS, .tv_nsec = wake % NS};
            clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL); /* EINTR: loop */
        } else if (!reniced) {
            normal_priority();
            reniced = 1;
        }
    }
    if (!reniced)
        normal_priority();
    execv(argv[2], argv + 2);
    int e = errno;
    char what[4200];
    snprintf(what, sizeof what, "cannot run %s: ", argv[2]);
    fail(what, strerror(e));
    return RUNNER_ERROR;
}
