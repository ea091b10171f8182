/* A slow disk for the benches' embedded Postgres: every fsync and fdatasync of the server waits
 * TICKWORK_BENCH_FSYNC_DELAY_US microseconds first, then syncs for real. Loaded with LD_PRELOAD
 * by bench/scratch.py when TICKWORK_BENCH_FSYNC_DELAY_MS is set, so a "slow-disk hour" (commit
 * latency several times the usual) can be reproduced on demand and compared in one run. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_first(void) {
    const char *text = getenv("TICKWORK_BENCH_FSYNC_DELAY_US");
    long us = text ? atol(text) : 0;
    struct timespec pause = {us / 1000000, (us % 1000000) * 1000};
    if (us > 0)
        nanosleep(&pause, NULL);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    wait_first();
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    wait_first();
    return real(fd);
}
