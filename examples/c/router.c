/* A C client of the router: connects to URI, publishes COUNT messages
 * "c0", "c1", ... on TOPIC, answers one request on rfq/c (within 20 s)
 * with "quote " and the request's bytes, and checks what the C API says
 * of misuse.
 * docs/c.md walks through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tickwire.h"

static void check(tw_status s, const char *what) {
    if (s != TW_OK) {
        fprintf(stderr, "%s: %s (status %d)\n", what, tw_last_error(), (int)s);
        exit(1);
    }
}

/* A request seen during a poll, answered after it: the callback may not
 * call the client it came from (TW_ERR_BUSY). */
struct pending {
    tw_client *c;
    int busy_refused;
    size_t inbox_len, len;
    char inbox[256];
    char payload[256];
};

static void on_event(void *user, const tw_event *e) {
    struct pending *p = user;
    if (e->kind == TW_EVENT_REQUEST && p != NULL && e->inbox_len <= sizeof p->inbox && e->payload_len <= sizeof p->payload) {
        memcpy(p->inbox, e->inbox, e->inbox_len);
        memcpy(p->payload, e->payload, e->payload_len);
        p->inbox_len = e->inbox_len;
        p->len = e->payload_len;
        p->busy_refused = tw_client_publish(p->c, "md/c", (const uint8_t *)"x", 1) == TW_ERR_BUSY;
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: router URI TOPIC COUNT\n");
        return 2;
    }
    tw_client_options opts = {0};
    opts.name = "c-example";
    tw_client *c;
    check(tw_client_connect(argv[1], &opts, &c), "connect");
    check(tw_client_wait_connected(c, 10000), "wait");
    uint32_t sid;
    check(tw_client_subscribe(c, "rfq/c", NULL, &sid), "subscribe");
    long count = atol(argv[3]);
    for (long i = 0; i < count; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof msg, "c%ld", i);
        tw_status s;
        while ((s = tw_client_publish(c, argv[2], (const uint8_t *)msg, (size_t)len)) == TW_ERR_BACK_PRESSURED) {
            check(tw_client_poll(c, on_event, NULL, 64, NULL), "poll");
        }
        check(s, "publish");
    }
    check(tw_client_flush(c), "flush");
    printf("published %ld\n", count);
    fflush(stdout);

    /* Misuse is an error code, never a crash. */
    if (tw_client_publish(c, NULL, NULL, 0) != TW_ERR_NULL) return 3;
    if (tw_client_publish(c, "bad//topic", (const uint8_t *)"x", 1) != TW_ERR_INVALID) return 3;
    if (tw_client_publish(NULL, "t", (const uint8_t *)"x", 1) != TW_ERR_NULL) return 3;
    if (tw_client_poll(c, NULL, NULL, 1, NULL) != TW_ERR_NULL) return 3;

    struct pending p = {0};
    p.c = c;
    for (int i = 0; i < 20000 && p.inbox_len == 0; i++) {
        check(tw_client_poll(c, on_event, &p, 64, NULL), "poll");
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (p.inbox_len > 0) {
        char reply[300];
        int len = snprintf(reply, sizeof reply, "quote %.*s", (int)p.len, p.payload);
        check(tw_client_reply(c, p.inbox, p.inbox_len, (const uint8_t *)reply, (size_t)len), "reply");
        check(tw_client_flush(c), "flush");
    }
    printf("answered %d, busy refused %d\n", p.inbox_len > 0, p.busy_refused);
    /* The reply goes with the next polls. */
    for (int i = 0; i < 50; i++) {
        check(tw_client_poll(c, on_event, NULL, 64, NULL), "poll");
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    check(tw_client_close(c), "close");
    /* A handle used after it was closed. */
    if (tw_client_close(c) != TW_ERR_CLOSED) return 4;
    if (tw_client_publish(c, "t", (const uint8_t *)"x", 1) != TW_ERR_CLOSED) return 4;
    printf("misuse refused: %s\n", tw_last_error());
    return 0;
}
