/* The benchmarks' stamp program: its first action reads the realtime clock, then it appends
 * "APPROACH NAME SCHEDULED_EPOCH STAMP policy=P ru=MINFLT,MAJFLT,NVCSW,NIVCSW woke=W xru=X" to
 * /var/lib/bench-stamps/stamps.log (O_APPEND: one write per line, so concurrent stamps never
 * interleave). Built static on the host (gcc -O2 -static) and copied into the container, so
 * every approach spawns the same binary and none pays an interpreter's start-up for it.
 *
 * After the clock, what bench/alternatives.py attributes a late fire with: its scheduling policy
 * (1 = SCHED_FIFO: the escort's window still open), getrusage(RUSAGE_SELF) (the whole process,
 * across its execs: for market-timers the runner, exec-at and the exec), and what
 * market-timers-exec-at exported before the exec: when its wait ended (MARKET_EXEC_AT_WOKE) and
 * the same counters then (MARKET_EXEC_AT_RUSAGE, spaces made commas); "-" when absent. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *env_or_dash(const char *name, char *copy, size_t size) {
    const char *v = getenv(name);
    if (!v || !*v)
        return "-";
    snprintf(copy, size, "%s", v);
    for (char *c = copy; *c; c++)
        if (*c == ' ')
            *c = ',';
    return copy;
}

int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (argc != 4) return 2;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int policy = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK;
    char woke[64], xru[128], line[768];
    int n = snprintf(line, sizeof line,
                     "%s %s %s %ld.%09ld policy=%d ru=%ld,%ld,%ld,%ld woke=%s xru=%s\n",
                     argv[1], argv[2], argv[3], (long)ts.tv_sec, ts.tv_nsec, policy,
                     ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw,
                     env_or_dash("MARKET_EXEC_AT_WOKE", woke, sizeof woke),
                     env_or_dash("MARKET_EXEC_AT_RUSAGE", xru, sizeof xru));
    if (n <= 0 || n >= (int)sizeof line) return 2;
    int fd = open("/var/lib/bench-stamps/stamps.log", O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (fd < 0) return 1;
    return write(fd, line, (size_t)n) == n ? 0 : 1;
}
