/* The benchmarks' stamp program: its first action reads the realtime clock, then it appends
 * "APPROACH NAME SCHEDULED_EPOCH STAMP" to /var/lib/bench-stamps/stamps.log (O_APPEND: one
 * write per line, so concurrent stamps never interleave). Built static on the host
 * (gcc -O2 -static) and copied into the container, so every approach spawns the same binary
 * and none pays an interpreter's start-up for it. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (argc != 4) return 2;
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s %s %ld.%09ld\n", argv[1], argv[2], argv[3],
                     (long)ts.tv_sec, ts.tv_nsec);
    if (n <= 0 || n >= (int)sizeof line) return 2;
    int fd = open("/var/lib/bench-stamps/stamps.log", O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (fd < 0) return 1;
    return write(fd, line, (size_t)n) == n ? 0 : 1;
}
