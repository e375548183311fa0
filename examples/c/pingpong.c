/* Ping-pong over shared memory from C: `pingpong pong DIR` reflects every
 * message it gets on ipc:pingpong stream 1 back on stream 2; `pingpong
 * ping DIR N` sends N 64-byte messages one at a time, waits for each to
 * come back, and prints the half round trip's p50 and p99 in ns.
 * docs/c.md walks through it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tickwire.h"

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int check(tw_status s, const char *what) {
    if (s != TW_OK) {
        fprintf(stderr, "%s: %s (status %d)\n", what, tw_last_error(), (int)s);
        exit(1);
    }
    return 0;
}

/* Every wait ends: a side whose peer died gives up after this long. */
#define GIVE_UP_NS (30ull * 1000000000ull)

/* A spinning wait reads the clock (for its deadline) once every this many
 * tries, not on each: a clock read costs as much as a look at the log. */
#define SPINS_PER_CLOCK_READ 256

/* Offers until there is room (the other side attached and keeping up). */
static void offer(tw_publication *p, const uint8_t *msg, size_t len) {
    tw_status s;
    uint64_t until = 0;
    for (unsigned tries = 0; ((s = tw_publication_offer(p, NULL, msg, len, NULL)) == TW_ERR_BACK_PRESSURED ||
                              s == TW_ERR_NOT_CONNECTED);
         tries++) {
        if (tries % SPINS_PER_CLOCK_READ == 0) {
            uint64_t now = now_ns();
            if (until == 0) until = now + GIVE_UP_NS;
            if (now > until) break;
        }
    }
    check(s, "offer");
}

/* The next message into buf, its length into *len. */
static void receive(tw_subscription *in, uint8_t *buf, size_t cap, size_t *len) {
    tw_status s;
    uint64_t until = 0;
    for (unsigned tries = 0; (s = tw_subscription_receive(in, buf, cap, len, 0)) == TW_ERR_TIMEOUT; tries++) {
        if (tries % SPINS_PER_CLOCK_READ == 0) {
            uint64_t now = now_ns();
            if (until == 0) until = now + GIVE_UP_NS;
            if (now > until) break;
        }
    }
    check(s, "receive");
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: pingpong pong DIR [N] | pingpong ping DIR N\n");
        return 2;
    }
    int ping = strcmp(argv[1], "ping") == 0;
    long n = argc > 3 ? atol(argv[3]) : 100000;
    if (n < 1) {
        fprintf(stderr, "pingpong: N must be at least 1\n");
        return 2;
    }
    tw_context *ctx;
    tw_publication *out;
    tw_subscription *in;
    check(tw_context_open(argv[2], &ctx), "context");
    check(tw_publication_open(ctx, "ipc:pingpong", ping ? 1 : 2, &out), "publication");
    /* The other side's stream exists once it has opened its publication. */
    tw_status opened;
    for (int tries = 0; (opened = tw_subscription_open(ctx, "ipc:pingpong", ping ? 2 : 1, &in)) == TW_ERR_IO &&
                        tries < 10000;
         tries++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    check(opened, "subscription");

    uint8_t msg[64] = {0}, got[256];
    size_t len;
    uint64_t *rtt = ping ? calloc((size_t)n, sizeof *rtt) : NULL;
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (ping) {
            memcpy(msg, &i, sizeof i);
            offer(out, msg, sizeof msg);
        }
        receive(in, got, sizeof got, &len);
        if (ping) {
            rtt[i] = (now_ns() - t0) / 2;
        } else {
            offer(out, got, len);
        }
    }
    if (ping) {
        qsort(rtt, (size_t)n, sizeof *rtt, cmp);
        printf("{\"messages\": %ld, \"p50_ns\": %llu, \"p99_ns\": %llu}\n", n,
               (unsigned long long)rtt[n / 2], (unsigned long long)rtt[n * 99 / 100]);
        free(rtt);
    }
    check(tw_subscription_close(in), "close");
    check(tw_publication_close(out, 0), "close");
    check(tw_context_close(ctx), "close");
    return 0;
}
