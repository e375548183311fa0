"""The real, unmodified Python NATS client (nats-py) against a tickwire
router's NATS listener: one scenario per command, each printing what it
saw as one JSON object for crates/cli/tests/nats.rs to check."""

import asyncio
import json
import ssl
import sys

import nats
from nats.errors import NoRespondersError, TimeoutError


def say(**kw):
    print(json.dumps(kw), flush=True)


async def basic(url):
    errors = []

    async def on_error(e):
        errors.append(str(e))

    nc = await nats.connect(url, name="py-basic", error_cb=on_error, allow_reconnect=False)
    got = []

    async def cb(m):
        got.append([m.subject, m.data.decode(), m.reply])

    await nc.subscribe("md.eu.*", cb=cb)
    await nc.subscribe("md.>", cb=cb)
    await nc.flush()
    await nc.publish("md.eu.VOD", b"hello")
    await nc.publish("md.us.IBM", b"hi")
    await nc.publish("fx.EURUSD", b"never")
    await nc.flush()

    async def responder(m):
        await m.respond(b"quote " + m.data)

    await nc.subscribe("rfq.>", cb=responder)
    await nc.flush()
    reply = await nc.request("rfq.eu.VOD", b"buy 100", timeout=2)
    try:
        await nc.request("nobody.listens", b"x", timeout=2)
        no_responders = "no error"
    except NoRespondersError:
        no_responders = "NoRespondersError"
    except TimeoutError:
        no_responders = "timeout"
    # Headers, on a message and on a request and its reply.
    headed = []

    async def on_headed(m):
        headed.append([m.subject, m.data.decode(), m.headers])

    await nc.subscribe("hdr.>", cb=on_headed)

    async def headed_responder(m):
        await nc.publish(m.reply, b"ok " + m.data, headers={"Answer": m.headers.get("Q", "none")})

    await nc.subscribe("hrfq", cb=headed_responder)
    await nc.flush()
    await nc.publish("hdr.x", b"with headers", headers={"Trace-Id": "t-1", "K": "v"})
    await nc.flush()
    hreply = await nc.request("hrfq", b"q", timeout=2, headers={"Q": "7"})
    await asyncio.sleep(0.3)
    say(got=sorted(got), reply=reply.data.decode(), no_responders=no_responders, errors=errors,
        headed=headed, headed_reply=[hreply.data.decode(), hreply.headers],
        connected=nc.is_connected, max_payload=nc.max_payload)
    await nc.close()


async def queue(url, members, n):
    ncs = [await nats.connect(url, name=f"py-q{i}") for i in range(members)]
    counts = [0] * members
    seen = set()

    def make(i):
        async def cb(m):
            counts[i] += 1
            seen.add(m.data)
        return cb

    for i, nc in enumerate(ncs):
        await nc.subscribe("orders.*", queue="workers", cb=make(i))
        await nc.flush()
    pub = await nats.connect(url, name="py-qpub")
    for k in range(n):
        await pub.publish("orders.eu", str(k).encode())
    await pub.flush()
    for _ in range(100):
        if sum(counts) >= n:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    say(counts=counts, distinct=len(seen))
    for nc in ncs + [pub]:
        await nc.close()


async def auth(url, user, password, **how):
    """Logs in (as `user` with `password`, or with `how`: a token, TLS),
    then publishes to itself."""
    if not how:
        how = dict(user=user, password=password)
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3, **how)
    except Exception as e:  # the client's own error types vary by version
        say(connected=False, error=type(e).__name__ + ": " + str(e))
        return
    got = []
    came = asyncio.Event()

    async def cb(m):
        got.append(m.data.decode())
        came.set()

    await nc.subscribe("md.>", cb=cb)
    await nc.flush()
    await nc.publish("md.eu", b"as " + user.encode())
    await nc.flush()
    try:
        await asyncio.wait_for(came.wait(), 5)
    except asyncio.TimeoutError:
        pass
    # Anything more (a duplicate) would come at once.
    await asyncio.sleep(0.1)
    say(connected=True, got=got)
    await nc.close()


async def publish(url, subject, n):
    nc = await nats.connect(url, name="py-pub")
    for k in range(n):
        await nc.publish(subject, b"m%d" % k)
        if k % 1000 == 999:
            await nc.flush()
    await nc.flush()
    say(published=n)
    await nc.close()


async def subscribe(url, subject, n, seconds):
    nc = await nats.connect(url, name="py-sub")
    got = []
    done = asyncio.get_running_loop().create_future()

    async def cb(m):
        got.append(m.data)
        if len(got) == n and not done.done():
            done.set_result(True)

    await nc.subscribe(subject, cb=cb, pending_msgs_limit=4_000_000, pending_bytes_limit=1 << 30)
    await nc.flush()
    say(ready=True)
    try:
        await asyncio.wait_for(done, seconds)
    except asyncio.TimeoutError:
        pass
    in_order = all(got[k] == b"m%d" % k for k in range(len(got)))
    say(received=len(got), in_order=in_order)
    await nc.close()


async def headers(url, subject, seconds):
    """Says ready once subscribed, then what the first message brought."""
    nc = await nats.connect(url, name="py-headers")
    sub = await nc.subscribe(subject)
    await nc.flush()
    say(ready=True)
    m = await sub.next_msg(timeout=seconds)
    say(subject=m.subject, data=m.data.decode(), headers=m.headers)
    await nc.close()


async def reconnect(url, seconds):
    """Subscribes, then waits for the router to go and come back: a
    message published after that arrives on the same subscription."""
    events = []

    async def disconnected():
        events.append("disconnected")

    async def reconnected():
        events.append("reconnected")

    nc = await nats.connect(url, name="py-re", reconnect_time_wait=0.2, max_reconnect_attempts=-1,
                            disconnected_cb=disconnected, reconnected_cb=reconnected)
    got = []

    async def cb(m):
        got.append(m.data.decode())

    await nc.subscribe("md.>", cb=cb)
    await nc.flush()
    say(ready=True)
    for _ in range(int(seconds * 10)):
        if "reconnected" in events:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    await nc.publish("md.after", b"after the restart")
    await nc.flush()
    await asyncio.sleep(0.3)
    say(events=events, got=got)
    await nc.close()


async def discover(url, n, seconds):
    """Given one server of a cluster: the servers its INFO told of; then,
    once that server stops, the one it moved to and the messages received
    there."""
    got = []
    done = asyncio.Event()

    async def cb(m):
        got.append(m.data)
        if len(got) >= n:
            done.set()

    async def reconnected():
        # Its subscription is sent again before this; answered, it holds.
        asyncio.ensure_future(moved())

    async def moved():
        await nc.flush()
        say(reconnected=nc.connected_url.netloc)

    nc = await nats.connect(url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, reconnected_cb=reconnected)
    await nc.subscribe("md.>", cb=cb)
    await nc.flush()
    say(servers=[s.netloc for s in nc.discovered_servers])
    try:
        await asyncio.wait_for(done.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    say(received=len(got))
    await nc.close()


if __name__ == "__main__":
    cmd, url, *rest = sys.argv[1:]
    if cmd == "basic":
        asyncio.run(basic(url))
    elif cmd == "queue":
        asyncio.run(queue(url, int(rest[0]), int(rest[1])))
    elif cmd == "auth":
        asyncio.run(auth(url, rest[0], rest[1]))
    elif cmd == "token":
        asyncio.run(auth(url, "token", "", token=rest[0]))
    elif cmd == "tls":
        # The router's certificate, for localhost; the URL names 127.0.0.1.
        ctx = ssl.create_default_context(cafile=rest[0])
        asyncio.run(auth(url, "tls", "", tls=ctx, tls_hostname="localhost"))
    elif cmd == "publish":
        asyncio.run(publish(url, rest[0], int(rest[1])))
    elif cmd == "subscribe":
        asyncio.run(subscribe(url, rest[0], int(rest[1]), float(rest[2])))
    elif cmd == "headers":
        asyncio.run(headers(url, rest[0], float(rest[1])))
    elif cmd == "discover":
        asyncio.run(discover(url, int(rest[0]), float(rest[1])))
    elif cmd == "reconnect":
        asyncio.run(reconnect(url, float(rest[0])))
    else:
        sys.exit(f"unknown command {cmd}")
