"""Ping-pong over shared memory from Python, the twin of examples/c/pingpong.c
(either side may be C): `pingpong.py pong DIR [N]` sends every message it gets
on ipc:pingpong stream 1 back on stream 2; `pingpong.py ping DIR N` sends N
64-byte messages one at a time, waits for each to come back, and prints the
half round trip's p50 and p99 in ns, and the same of an empty Python loop
timed the same way (the interpreter's floor). docs/python.md walks through it.
"""

import json
import sys
import time

import tickwire

GIVE_UP = 30.0  # seconds: a side whose peer died gives up


def open_subscription(ctx, stream):
    """The other side's stream exists once it has opened its publication."""
    until = time.monotonic() + GIVE_UP
    while True:
        try:
            return ctx.subscription("ipc:pingpong", stream)
        except tickwire.Error:
            if time.monotonic() > until:
                raise
            time.sleep(0.001)


def next_message(receive, Message=tickwire.Message):
    """The next message of `receive` (a subscription's), other events
    passed over. Names bound once, as a hot loop in Python wants."""
    while True:
        e = receive(GIVE_UP)
        if type(e) is Message:
            return e
        if e is None:
            sys.exit("pingpong: the other side went quiet")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("ping", "pong"):
        sys.exit("usage: pingpong.py pong DIR [N] | pingpong.py ping DIR N")
    ping = sys.argv[1] == "ping"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    if n < 1:
        sys.exit("pingpong: N must be at least 1")
    with tickwire.Context(sys.argv[2]) as ctx:
        out = ctx.publication("ipc:pingpong", 1 if ping else 2)
        sub = open_subscription(ctx, 2 if ping else 1)
        now, publish, receive = time.perf_counter_ns, out.publish, sub.receive
        if not ping:
            for _ in range(n):
                publish(next_message(receive).payload, None, GIVE_UP)
        else:
            msg = bytearray(64)
            rtt = [0] * n
            for i in range(n):
                t0 = now()
                msg[:8] = i.to_bytes(8, "little")
                publish(msg, None, GIVE_UP)
                next_message(receive)
                rtt[i] = (now() - t0) // 2
            # The floor: the same loop, timed the same way, doing nothing.
            floor = [0] * n
            for i in range(n):
                t0 = now()
                msg[:8] = i.to_bytes(8, "little")
                floor[i] = (now() - t0) // 2
            rtt.sort()
            floor.sort()
            print(json.dumps({
                "messages": n,
                "p50_ns": rtt[n // 2],
                "p99_ns": rtt[n * 99 // 100],
                "loop_p50_ns": floor[n // 2],
                "loop_p99_ns": floor[n * 99 // 100],
            }))
        sub.close()
        out.close()


if __name__ == "__main__":
    main()
