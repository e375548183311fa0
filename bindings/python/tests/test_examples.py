"""The examples in examples/python, run as a user would, against Rust and C
processes: Python against C over shared memory, a C publisher to a Python
subscriber through the router, and a Python subscriber killed mid-stream."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, Router, python_child, target, tickwire_bin

EXAMPLES = ROOT / "examples/python"


def c_program(name: str, out) -> str:
    """examples/c/NAME.c compiled against target/PROFILE/libtickwire.so."""
    lib = target()
    if not (lib / "libtickwire.so").exists():
        pytest.fail(f"{lib}/libtickwire.so missing: cargo build -p tickwire-ffi")
    bin = str(out / name)
    subprocess.run(
        ["cc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-Wall", "-Werror", "-I", str(ROOT / "include"),
         str(ROOT / f"examples/c/{name}.c"), "-L", str(lib), "-ltickwire", f"-Wl,-rpath,{lib}", "-o", bin],
        check=True, timeout=120,
    )
    return bin


def ping(pong_cmd, shm_dir, n=2000):
    pong = subprocess.Popen(pong_cmd)
    try:
        out = subprocess.run(
            [python_exe(), str(EXAMPLES / "pingpong.py"), "ping", str(shm_dir), str(n)],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert pong.wait(30) == 0
    finally:
        if pong.poll() is None:
            pong.kill()
            pong.wait()
    return json.loads(out.stdout)


def line_within(proc, seconds=20.0):
    """The next line `proc` prints, or a failure after `seconds`."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(seconds):
            proc.kill()
            pytest.fail(f"no line from {proc.args} within {seconds} s")
    return proc.stdout.readline()


def python_exe():
    import sys

    return sys.executable


def test_python_ping_pong_over_shared_memory_leaves_nothing_behind(shm_dir):
    r = ping([python_exe(), str(EXAMPLES / "pingpong.py"), "pong", str(shm_dir), "2000"], shm_dir)
    assert r["messages"] == 2000
    assert 0 < r["p50_ns"] <= r["p99_ns"]
    assert 0 < r["loop_p50_ns"] < r["p50_ns"]
    # Both sides closed what they opened: their logs and counters are gone.
    assert sorted(os.listdir(shm_dir)) == []


def test_python_pings_the_c_pong(shm_dir, tmp_path):
    r = ping([c_program("pingpong", tmp_path), "pong", str(shm_dir), "2000"], shm_dir)
    assert r["messages"] == 2000 and r["p50_ns"] > 0


def test_a_c_publisher_reaches_the_async_python_subscriber_through_the_router(router, tmp_path):
    sub = python_child(str(EXAMPLES / "subscribe_async.py"), router.uri, "md/c", "50",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert line_within(sub) == "subscribed\n"
        time.sleep(0.2)  # the subscription reaches the router
        c = subprocess.Popen([c_program("router", tmp_path), router.uri, "md/c", "50"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = sub.communicate(timeout=60)
        lines = out.splitlines()
        assert lines[:50] == [f"md/c c{i}" for i in range(50)], err
        assert lines[50].startswith("done, the loop beat ")
        assert int(lines[50].split()[4]) > 0  # the event loop ran while it waited
        # ... and Python asks the C client for a quote (its one request).
        import tickwire

        with tickwire.Client(router.uri) as py:
            assert py.request("rfq/c", b"EURUSD", timeout=20) == b"quote EURUSD"
        c_out, c_err = c.communicate(timeout=60)
        assert c.returncode == 0, c_err
        assert "answered 1" in c_out
    finally:
        for p in (sub, locals().get("c")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


KILLED = """
import sys, tickwire
ctx = tickwire.Context(sys.argv[1])
sub = ctx.subscription("ipc:md", 10)
n = 0
while True:
    if isinstance(sub.receive(5), tickwire.Message):
        n += 1
        if n == 1000:
            print("receiving", flush=True)
"""


def test_a_python_subscriber_killed_mid_stream_leaves_only_what_clean_removes(shm_dir):
    publisher = subprocess.Popen(
        [tickwire_bin(), "pub", "--dir", str(shm_dir), "--channel", "ipc:md", "--stream", "10",
         "--rate", "20k", "--count", "60000", "--wait", "10s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        until = time.monotonic() + 10
        while not (shm_dir / "md-10.log").exists() and time.monotonic() < until:
            time.sleep(0.01)
        sub = python_child("-c", KILLED, str(shm_dir), stdout=subprocess.PIPE, text=True)
        assert line_within(sub) == "receiving\n"
        assert f"counters-{sub.pid}.twc" in os.listdir(shm_dir)
        os.kill(sub.pid, signal.SIGKILL)
        sub.wait()
        clean = subprocess.run([tickwire_bin(), "clean", "--dir", str(shm_dir)],
                               capture_output=True, text=True, timeout=30)
        assert clean.returncode == 0, clean.stderr
        assert f"process {sub.pid} is dead" in clean.stdout + clean.stderr
        # What is left is the live publisher's alone.
        left = sorted(os.listdir(shm_dir))
        assert left == [f"counters-{publisher.pid}.twc", "md-10.log"], left
        out, _ = publisher.communicate(timeout=30)
        assert publisher.returncode == 0, out
        assert "published 60000 messages" in out  # not held up by the dead subscriber
        assert os.listdir(shm_dir) == []
    finally:
        if publisher.poll() is None:
            publisher.kill()
            publisher.wait()


def test_the_lab_measures_c_and_python_beside_rust(shm_dir, tmp_path):
    out = subprocess.run(
        [tickwire_bin(), "--dir", str(shm_dir), "lab", "bindings", "--c", c_program("pingpong", tmp_path),
         "--python", python_exe(), "--examples", str(EXAMPLES), "--count", "2000", "--messages", "200000",
         "--rounds", "1", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    rows = {row["path"]: row for row in r["pingpong"]}
    assert list(rows) == ["rust lab", "c example", "python example", "python empty loop"]
    for row in rows.values():
        assert row["median_p50_ns"] > 0 and row["p50_vs_rust"] > 0, row
    rates = {row["path"]: row["median_msgs_per_s"] for row in r["throughput"]}
    assert rates["rust offer"] > 0 and rates["python publish_many"] > 0, rates
    assert os.listdir(shm_dir) == []  # every program's directory removed
