"""Router clients over TCP, against the real `tickwire router`."""

import asyncio
import threading
import time

import pytest

import tickwire


def settled(client):
    """Returns once the router has handled everything `client` sent before
    (its subscriptions among them): a request nobody serves comes back
    NoResponders after them."""
    client.flush()
    with pytest.raises(tickwire.NoResponders):
        client.request("settle/nobody", b"", timeout=10.0)


def next_of(client, kind, timeout=5.0):
    """The next event of class `kind`, others passed over."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        e = client.receive(0.1)
        if isinstance(e, kind):
            return e
    raise AssertionError(f"no {kind.__name__} within {timeout} s")


def test_wildcard_subscription_gets_messages_with_headers(router):
    with tickwire.Client(router.uri, name="sub") as sub, tickwire.Client(router.uri, name="pub") as pub:
        sub.subscribe("md/>")
        settled(sub)
        pub.publish("md/eur/usd", b"1.08", headers={"Venue": "XLON"})
        pub.publish("other", b"not for sub")
        pub.publish("md/gbp", memoryview(b"1.27"))
        pub.flush()
        m1, m2 = next_of(sub, tickwire.Message), next_of(sub, tickwire.Message)
        assert (m1.topic, m1.payload, m1.headers) == ("md/eur/usd", b"1.08", [("Venue", "XLON")])
        assert (m2.topic, m2.payload, m2.headers) == ("md/gbp", b"1.27", None)
        assert m2.sequence > m1.sequence


def test_publish_many_delivers_every_message_in_order(router):
    with tickwire.Client(router.uri) as sub, tickwire.Client(router.uri) as pub:
        sub.subscribe("bulk")
        settled(sub)
        payloads = [i.to_bytes(4, "little") for i in range(20000)]
        assert pub.publish_many("bulk", payloads) == 20000
        got = []
        until = time.monotonic() + 20
        while len(got) < 20000 and time.monotonic() < until:
            e = sub.receive(0.05)
            if isinstance(e, tickwire.Message):
                got.append(e.payload)
            got += [e.payload for e in sub.poll(4096) if isinstance(e, tickwire.Message)]
        assert got == payloads


def test_request_and_reply_between_two_python_clients(router):
    with tickwire.Client(router.uri) as server, tickwire.Client(router.uri) as caller:
        server.subscribe("svc/echo")
        settled(server)
        done = threading.Event()

        def serve():
            while not done.is_set():
                e = server.receive(0.05)
                if isinstance(e, tickwire.Request):
                    server.reply(e.inbox, e.payload.upper())
                    server.flush()

        t = threading.Thread(target=serve)
        t.start()
        try:
            assert caller.request("svc/echo", b"ping", timeout=5.0) == b"PING"
            with pytest.raises(tickwire.NoResponders):
                caller.request("svc/nobody", b"x", timeout=5.0)
        finally:
            done.set()
            t.join()


def test_queue_group_members_share_the_messages(router):
    with tickwire.Client(router.uri) as a, tickwire.Client(router.uri) as b, tickwire.Client(router.uri) as pub:
        a.subscribe("jobs", group="workers")
        b.subscribe("jobs", group="workers")
        settled(a)
        settled(b)
        pub.publish_many("jobs", [bytes([i]) for i in range(100)])
        got = []
        until = time.monotonic() + 10
        while len(got) < 100 and time.monotonic() < until:
            for c in (a, b):
                got += [e.payload for e in c.poll() if isinstance(e, tickwire.Message)]
            time.sleep(0.01)
        assert sorted(got) == [bytes([i]) for i in range(100)]


def test_async_for_over_a_client(router):
    async def main(sub, pub):
        loop = asyncio.get_running_loop()

        def send():
            pub.publish("tick", b"x")
            pub.flush()

        loop.call_later(0.1, send)
        async for e in sub:
            if isinstance(e, tickwire.Message):
                return e.payload

    with tickwire.Client(router.uri) as sub, tickwire.Client(router.uri) as pub:
        sub.subscribe("tick")
        settled(sub)
        assert asyncio.run(asyncio.wait_for(main(sub, pub), 10)) == b"x"


def test_a_client_used_after_close_raises_closed_error(router):
    c = tickwire.Client(router.uri)
    assert c.is_connected
    c.close()
    c.close()  # twice is fine
    for call in (lambda: c.publish("t", b"x"), lambda: c.subscribe("t"), lambda: c.receive(0), lambda: c.is_connected):
        with pytest.raises(tickwire.ClosedError):
            call()
    assert list(c) == []


def test_connecting_to_nobody_times_out_and_bad_uris_name_themselves(router):
    with pytest.raises(TimeoutError):
        tickwire.Client("tcp://127.0.0.1:1", timeout=0.3)
    with pytest.raises(ValueError, match="bogus"):
        tickwire.Client("bogus://x")
    with tickwire.Client(router.uri) as c:
        with pytest.raises(ValueError):
            c.subscribe("a//b")
        with pytest.raises(TypeError):
            c.publish("t", 42)


def test_a_lost_router_and_its_return_are_events(shm_dir):
    from conftest import Router

    r = Router(shm_dir)
    with tickwire.Client(r.uri) as c:  # waits for the welcome (its Connected)
        r.stop()
        assert next_of(c, tickwire.Disconnected).reason
        with pytest.raises(tickwire.NotConnected):
            c.request("svc", b"x", timeout=0.2)
        r = Router(shm_dir, listen=r.uri)  # back on the same port
        try:
            assert next_of(c, tickwire.Connected, timeout=10).router
            assert c.is_connected
        finally:
            r.stop()


def test_the_welcome_and_what_came_with_it_stay_for_receive(router):
    with tickwire.Client(router.uri) as c:  # waited for the welcome
        first = c.receive(0)
        assert isinstance(first, tickwire.Connected) and first.router


def test_close_from_another_thread_ends_a_waiting_iteration(router):
    c = tickwire.Client(router.uri)
    seen = []
    t = threading.Thread(target=lambda: seen.extend(c))  # waits for ever
    t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    c.close()  # does not wait for the iteration
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 2
    with pytest.raises(tickwire.ClosedError):
        c.publish("t", b"x")


def test_close_from_a_signal_handler_ends_the_wait_it_interrupted(router):
    import signal

    c = tickwire.Client(router.uri)
    old = signal.signal(signal.SIGALRM, lambda *_: c.close())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(tickwire.ClosedError):
            while True:
                c.receive(2.0)
        assert time.monotonic() - t0 < 1.5
    finally:
        signal.signal(signal.SIGALRM, old)


def test_another_task_publishes_on_the_client_an_async_for_reads(router):
    async def main(c):
        async def publish():
            for i in range(50):
                c.publish("own", bytes([i]))  # never BusyError: async for holds the client only to look
                await asyncio.sleep(0)
            c.flush()

        task = asyncio.create_task(publish())
        got = []
        async for e in c:
            if isinstance(e, tickwire.Message):
                got.append(e.payload)
                if len(got) == 50:
                    break
        await task
        return got

    with tickwire.Client(router.uri) as c:
        c.subscribe("own")
        settled(c)
        assert asyncio.run(asyncio.wait_for(main(c), 10)) == [bytes([i]) for i in range(50)]


def test_cancelled_async_steps_lose_no_message(router):
    async def main(sub, pub):
        it = sub.__aiter__()
        got = []
        pub.publish_many("steps", [bytes([i]) for i in range(100)])
        until = time.monotonic() + 10
        while len(got) < 100 and time.monotonic() < until:
            try:
                e = await asyncio.wait_for(anext(it), 0.0005)  # often cancelled mid-wait
            except asyncio.TimeoutError:
                continue
            if isinstance(e, tickwire.Message):
                got.append(e.payload)
        return got

    with tickwire.Client(router.uri) as sub, tickwire.Client(router.uri) as pub:
        sub.subscribe("steps")
        settled(sub)
        assert asyncio.run(main(sub, pub)) == [bytes([i]) for i in range(100)]


def test_huge_and_bad_timeouts_are_errors_or_for_ever_never_a_panic(router):
    with tickwire.Client(router.uri, timeout=None) as c:
        c.subscribe("svc/huge")
        settled(c)
        rid = c.send_request("svc/huge", b"x", timeout=1e19)  # a century, not an overflow
        assert rid > 0
        with pytest.raises(tickwire.NoResponders):
            c.request("svc/none", b"x", timeout=1e19)
        for bad in (-1.0, float("nan")):
            with pytest.raises(ValueError, match="timeout"):
                c.request("svc/none", b"x", timeout=bad)
            with pytest.raises(ValueError, match="timeout"):
                c.receive(bad)


def test_publish_many_names_how_many_went_before_an_error(router):
    with tickwire.Client(router.uri) as c:
        with pytest.raises(TypeError) as e:
            c.publish_many("t", [b"a", b"b", 3, b"d"])
        assert e.value.published == 2


def test_each_subscription_iterates_its_own_messages(router):
    with tickwire.Client(router.uri) as c, tickwire.Client(router.uri) as pub:
        prices, trades = c.subscribe("px/>"), c.subscribe("tr/*")
        c.subscribe("svc/q")  # a request: neither iterator's
        settled(c)
        for i in range(5):
            pub.publish("px/eur", bytes([i]))
            pub.publish("tr/eur", bytes([100 + i]))
        pub.flush()
        asked = threading.Thread(target=lambda: pytest.raises(TimeoutError, pub.request, "svc/q", b"?", 0.5))
        asked.start()
        tr = c.messages(trades)
        got_tr = [tr.receive(5).payload for _ in range(5)]
        got_px = [m.payload for _, m in zip(range(5), c.messages(prices))]
        assert got_tr == [bytes([100 + i]) for i in range(5)]
        assert got_px == [bytes([i]) for i in range(5)]
        assert tr.receive(0) is None
        asked.join()
        assert isinstance(next_of(c, tickwire.Request), tickwire.Request)  # left for receive
        c.unsubscribe(trades)
        assert list(tr) == []  # an ended subscription's iterator ends


def test_async_for_over_one_subscription(router):
    async def main(c, pub, sid):
        pub.publish("a/x", b"not this")
        pub.publish("b/x", b"this")
        pub.flush()
        async for m in c.messages(sid):
            return m.topic, m.payload

    with tickwire.Client(router.uri) as c, tickwire.Client(router.uri) as pub:
        c.subscribe("a/>")
        sid = c.subscribe("b/>")
        settled(c)
        assert asyncio.run(asyncio.wait_for(main(c, pub, sid), 10)) == ("b/x", b"this")
        assert isinstance(next_of(c, tickwire.Message), tickwire.Message)  # a/x waits for receive
