"""A router subscriber on asyncio: `subscribe_async.py URI PATTERN N` prints
"subscribed", then the topic and payload of each of N messages matching
PATTERN as they come, while the event loop stays free for other work (here,
a heartbeat task). docs/python.md walks through it.
"""

import asyncio
import sys

import tickwire


async def heartbeat(beats):
    while True:
        await asyncio.sleep(0.01)
        beats[0] += 1


async def main(uri, pattern, n):
    beats = [0]
    ticker = asyncio.create_task(heartbeat(beats))
    with tickwire.Client(uri, name="subscribe_async") as client:
        client.subscribe(pattern)
        client.flush()
        print("subscribed", flush=True)
        got = 0
        async for event in client:
            if isinstance(event, tickwire.Message):
                print(event.topic, event.payload.decode(errors="replace"), flush=True)
                got += 1
                if got == n:
                    break
            elif isinstance(event, tickwire.Disconnected):
                print("disconnected:", event.reason, file=sys.stderr, flush=True)
    ticker.cancel()
    print(f"done, the loop beat {beats[0]} times meanwhile", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: subscribe_async.py URI PATTERN N")
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
