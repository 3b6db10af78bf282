// disk_stalls STAT_FILE SECONDS: watches one block device for SECONDS through its statistics
// (/sys/dev/block/MAJ:MIN/stat, the kernel's Documentation/block/stat.rst) and prints the
// spans in which it held I/O in flight and completed none: the device, not its
// user, stalled. Passive (it adds no I/O) and sampled every 2 ms (a read of the statistics costs
// ~50 µs of CPU here: ~2% of one core), so it sees the stalls between the disk
// probe's flushes too (Benchmarks/load-common.sh, disk_watch).
//
// A span is counted from the first sample that saw I/O in flight and nothing completed since
// the sample before, to the last sample of that run: a lower bound of how long the I/O in
// flight waited (it may have been issued just after the sample before, and it may complete
// just before the sample after).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// Fields 1, 5, 12 and 16 (reads, writes, discards and flushes completed; the last two 0 on
// older kernels) and 9 (in flight).
static int sample(int fd, unsigned long long *completed, unsigned long long *inflight) {
    char text[512];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return -1;
    text[n] = 0;
    unsigned long long v[17] = {0};
    int k = 0;
    char *p = text, *end;
    while (k < 17) {
        unsigned long long x = strtoull(p, &end, 10);
        if (end == p) break;
        v[k++] = x;
        p = end;
    }
    if (k < 11) return -1;
    *completed = v[0] + v[4] + v[11] + v[15];
    *inflight = v[8];
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: disk_stalls STAT_FILE SECONDS\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "disk_stalls: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    double seconds = atof(argv[2]), begin = now(), first = 0, last = 0, longest = 0, beyond = 0;
    unsigned long long before = 0, completed, inflight;
    int over = 0, stalled = 0;
    if (sample(fd, &before, &inflight) != 0) {
        fprintf(stderr, "disk_stalls: %s: not a block device's statistics\n", argv[1]);
        return 2;
    }
    struct timespec interval = {0, 2000000};
    for (;;) {
        nanosleep(&interval, NULL);
        double t = now();
        if (sample(fd, &completed, &inflight) != 0) return 2;
        int done = t > begin + seconds;
        if (!done && inflight > 0 && completed == before) {
            if (!stalled) first = t;
            stalled = 1;
            last = t;
        } else if (stalled) {
            double span = (last - first) * 1000;
            if (span > 20) {
                over++;
                beyond += span - 20;
            }
            if (span > longest) longest = span;
            stalled = 0;
        }
        before = completed;
        if (done) break;
    }
    printf("disk device: %d stalls over 20 ms (I/O in flight, none completed), longest %.1f ms, %.0f ms beyond 20 ms in them\n", over,
           longest, beyond);
    return 0;
}
