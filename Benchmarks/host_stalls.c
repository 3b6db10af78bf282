// host_stalls SECONDS: watches this machine for SECONDS and prints the spans in which it did
// not run a thread that asked to: a thread that sleeps 1 ms at a time, at the highest
// real-time priority when it may have it (SCHED_FIFO: it then preempts every normal task, so
// it wakes late only when the kernel, or the hypervisor under it, ran nothing of ours — not
// because the servers kept the cores busy), counts each wake-up later than 20 ms. Beside each
// late wake-up it reads the time the hypervisor took the virtual CPUs away for (steal, the
// 8th field of /proc/stat's "cpu" line, summed over all of them) from just before the sleep to
// just after: the machine was paused, not slow. Costs one /proc/stat read (~7 µs here; more
// on a machine with many CPUs) and one wake-up every ~1 ms (Benchmarks/load-common.sh,
// host_watch).
//
// A late wake-up's span is what it overslept: from when it should have woken (1 ms after the
// sleep began) to when it ran. Without SCHED_FIFO (not root, or RLIMIT_RTPRIO 0) the thread
// is a normal one and a busy machine delays it too: the line says so.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// The "cpu" line's steal (field 8), in ms; -1 when it cannot be read.
static double steal_ms(int fd, long hz) {
    char text[256];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return -1;
    text[n] = 0;
    if (strncmp(text, "cpu ", 4) != 0) return -1;
    char *p = text + 4, *end;
    unsigned long long v = 0;
    for (int k = 0; k < 8; k++) {
        v = strtoull(p, &end, 10);
        if (end == p) return -1;
        p = end;
    }
    return v * 1000.0 / hz;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: host_stalls SECONDS\n");
        return 2;
    }
    int fd = open("/proc/stat", O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "host_stalls: /proc/stat: %s\n", strerror(errno));
        return 2;
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0) hz = 100;
    struct sched_param param = {.sched_priority = sched_get_priority_max(SCHED_FIFO)};
    int realtime = sched_setscheduler(0, SCHED_FIFO, &param) == 0;
    // A page fault in the loop would be a stall of ours, not the machine's.
    mlockall(MCL_CURRENT | MCL_FUTURE);
    double seconds = atof(argv[1]), begin = now(), longest = 0, beyond = 0, stolen_late = 0;
    double steal_begin = steal_ms(fd, hz);
    int over = 0;
    struct timeval longest_at = {0, 0};
    struct timespec interval = {0, 1000000};
    double before = steal_begin;
    for (;;) {
        double asleep = now();
        nanosleep(&interval, NULL);
        double woke = now(), after = steal_ms(fd, hz);
        double late = (woke - asleep) * 1000 - 1;
        if (late > 20) {
            over++;
            beyond += late - 20;
            if (before >= 0 && after >= before) stolen_late += after - before;
        }
        if (late > longest) {
            longest = late;
            gettimeofday(&longest_at, NULL);
        }
        before = after;
        if (woke > begin + seconds) break;
    }
    double steal_end = steal_ms(fd, hz);
    char at[16] = "-";
    struct tm utc;
    if (longest_at.tv_sec > 0 && gmtime_r(&longest_at.tv_sec, &utc) != NULL)
        snprintf(at, sizeof at, "%02d:%02d:%02d.%03d", utc.tm_hour, utc.tm_min, utc.tm_sec, (int)(longest_at.tv_usec / 1000));
    printf("host: %d wake-ups over 20 ms late (%s), longest %.1f ms (woke %s UTC), %.0f ms beyond 20 ms in them; ", over,
           realtime ? "SCHED_FIFO" : "normal priority: a busy machine delays it too", longest, at, beyond);
    if (steal_begin >= 0 && steal_end >= steal_begin)
        printf("steal %.0f ms in them, %.0f ms in all (over %ld CPUs)\n", stolen_late, steal_end - steal_begin,
               sysconf(_SC_NPROCESSORS_ONLN));
    else
        printf("steal not reported\n");
    return 0;
}
