"""Publishing throughput from Python over shared memory:
`throughput.py DIR N BATCH` publishes N 64-byte messages on ipc:bulk stream
1, BATCH at a time with `publish_many`, once a subscriber is attached, and
prints {"messages": N, "msgs_per_s": ...} as the publisher saw it.
`tickwire lab bindings` runs it against a subscriber of its own (the rate
it reports is the subscriber's). docs/python.md walks through it.
"""

import json
import sys
import time

import tickwire


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: throughput.py DIR N BATCH")
    n, batch = int(sys.argv[2]), int(sys.argv[3])
    if n < 1 or batch < 1:
        sys.exit("throughput.py: N and BATCH must be at least 1")
    with tickwire.Context(sys.argv[1]) as ctx:
        pub = ctx.publication("ipc:bulk", 1)
        until = time.monotonic() + 30
        while not pub.is_connected:
            if time.monotonic() > until:
                sys.exit("throughput.py: no subscriber within 30 s")
            time.sleep(0.001)
        # Each message leads with its sequence number, as the lab's do.
        payloads = [i.to_bytes(8, "little") + bytes(56) for i in range(batch)]
        sent = 0
        t0 = time.perf_counter()
        while sent < n:
            sent += pub.publish_many(payloads[: n - sent], timeout=30)
        seconds = time.perf_counter() - t0
        print(json.dumps({"messages": sent, "msgs_per_s": sent / seconds if seconds > 0 else 0.0}))
        pub.close()


if __name__ == "__main__":
    main()
