"""Channels without a router, over shared memory."""

import asyncio
import time

import pytest

import tickwire


def pair(ctx, name="ipc:t", stream=1):
    pub = ctx.publication(name, stream)
    sub = ctx.subscription(name, stream)
    return pub, sub


def messages(sub, n, timeout=5.0):
    out = []
    until = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < until:
        e = sub.receive(0.1)
        if isinstance(e, tickwire.Message):
            out.append(e)
    return out


def test_a_message_published_is_received_with_its_topic_and_payload(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        position = pub.publish(b"hello", topic="md/eur")
        assert position >= 0
        [m] = messages(sub, 1)
        assert (m.topic, m.payload, m.headers) == ("md/eur", b"hello", None)
        assert m.sequence < position  # where it starts; publish gives where it ends
        assert m.session_id is not None


def test_bytearray_and_memoryview_payloads_are_taken(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        pub.publish(bytearray(b"ab"))
        pub.publish(memoryview(b"xcdx")[1:3])
        assert [m.payload for m in messages(sub, 2)] == [b"ab", b"cd"]
        with pytest.raises(TypeError):
            pub.publish("a str is not bytes")


def test_publish_many_publishes_every_payload_in_order(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        payloads = [i.to_bytes(4, "little") for i in range(1000)]
        assert pub.publish_many(payloads) == 1000
        got = [m.payload for m in messages(sub, 1000)]
        assert got == payloads


def test_offer_without_a_subscriber_raises_not_connected(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub = ctx.publication("ipc:alone", 1)
        with pytest.raises(tickwire.NotConnected):
            pub.offer(b"x")
        with pytest.raises(tickwire.NotConnected):
            pub.publish(b"x", timeout=0.05)
        assert issubclass(tickwire.NotConnected, tickwire.Error)


def test_receive_gives_none_after_its_timeout(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        _pub, sub = pair(ctx)
        sub.poll()  # the Joined event
        t0 = time.monotonic()
        assert sub.receive(0.1) is None
        assert 0.09 <= time.monotonic() - t0 < 2.0
        with pytest.raises(ValueError):
            sub.receive(-1)


def test_poll_returns_what_is_there_without_waiting(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        for i in range(10):
            pub.publish(bytes([i]))
        events = sub.poll(100)
        got = [e.payload for e in events if isinstance(e, tickwire.Message)]
        assert got == [bytes([i]) for i in range(10)]
        assert sub.poll() == []


def test_a_subscription_is_an_iterator_that_ends_when_closed(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        pub.publish_many([b"1", b"2", b"3"])
        got = []
        for e in sub:
            if isinstance(e, tickwire.Message):
                got.append(e.payload)
                if len(got) == 3:
                    sub.close()
        assert got == [b"1", b"2", b"3"]


def test_async_for_over_a_subscription(shm_dir):
    async def main(sub, pub):
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, pub.publish_many, [b"a", b"b"])
        got = []
        async for e in sub:
            if isinstance(e, tickwire.Message):
                got.append(e.payload)
                if len(got) == 2:
                    break
        return got

    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        assert asyncio.run(asyncio.wait_for(main(sub, pub), 10)) == [b"a", b"b"]


def test_objects_used_after_close_raise_closed_error(shm_dir):
    ctx = tickwire.Context(shm_dir)
    pub, sub = pair(ctx)
    ctx.close()
    pub.publish(b"still open")  # a closed context leaves its objects usable
    with pytest.raises(tickwire.ClosedError):
        ctx.publication("ipc:t", 2)
    pub.close()
    sub.close()
    sub.close()  # twice is fine
    with pytest.raises(tickwire.ClosedError):
        pub.publish(b"x")
    with pytest.raises(tickwire.ClosedError):
        sub.receive(0)
    with pytest.raises(tickwire.ClosedError):
        sub.poll()
    assert list(sub) == []


def test_a_bad_channel_names_itself(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        with pytest.raises(ValueError, match="nope:x"):
            ctx.publication("nope:x")
        with pytest.raises(tickwire.Error, match="ipc:missing"):
            ctx.subscription("ipc:missing", 9)


def test_a_subscription_used_by_two_threads_at_once_raises_busy(shm_dir):
    import threading

    with tickwire.Context(shm_dir) as ctx:
        _pub, sub = pair(ctx)
        sub.poll()
        t = threading.Thread(target=sub.receive, args=(0.5,))
        t.start()
        time.sleep(0.1)
        with pytest.raises(tickwire.BusyError):
            sub.receive(0)
        t.join()
        assert sub.receive(0) is None


def test_any_buffer_is_taken_as_its_bytes(shm_dir):
    import array

    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        a = array.array("i", [1, 2])
        pub.publish(a)
        [m] = messages(sub, 1)
        assert m.payload == a.tobytes()


def test_publish_many_names_how_many_went_before_an_error(shm_dir):
    with tickwire.Context(shm_dir) as ctx:
        pub, sub = pair(ctx)
        with pytest.raises(TypeError) as e:
            pub.publish_many([b"a", "not bytes", b"c"])
        assert e.value.published == 1
        assert [m.payload for m in messages(sub, 1)] == [b"a"]


def test_close_from_another_thread_ends_an_iteration(shm_dir):
    import threading

    with tickwire.Context(shm_dir) as ctx:
        _pub, sub = pair(ctx)
        t = threading.Thread(target=lambda: list(sub))
        t.start()
        time.sleep(0.1)
        sub.close()
        t.join(5)
        assert not t.is_alive()


def test_a_udp_publication_without_receivers_closes_quietly():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d, tickwire.Context(d) as ctx:
        with ctx.publication(f"udp://127.0.0.1:{port}", 1) as pub:
            with pytest.raises(tickwire.NotConnected):
                pub.offer(b"x")
        # with a linger, nobody acknowledging is an error
        pub2 = ctx.publication(f"udp://127.0.0.1:{port}", 2)
        with pytest.raises(tickwire.Error):
            pub2.close(linger=0.2)
