"""Router clients over TCP, against the real `tickwire router`."""

import asyncio
import threading
import time

import pytest

import tickwire


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
        sub.flush()
        time.sleep(0.1)  # the subscription reaches the router
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
        sub.flush()
        time.sleep(0.1)
        payloads = [i.to_bytes(4, "little") for i in range(20000)]
        assert pub.publish_many("bulk", payloads) == 20000
        got = []
        until = time.monotonic() + 20
        while len(got) < 20000 and time.monotonic() < until:
            got += [e.payload for e in sub.poll(4096) if isinstance(e, tickwire.Message)]
            if not got:
                sub.receive(0.01)
        assert got == payloads


def test_request_and_reply_between_two_python_clients(router):
    with tickwire.Client(router.uri) as server, tickwire.Client(router.uri) as caller:
        server.subscribe("svc/echo")
        server.flush()
        time.sleep(0.1)
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
        a.flush()
        b.flush()
        time.sleep(0.1)
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
        sub.flush()
        time.sleep(0.1)
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
