"""What the tests share: a shared-memory directory of their own, the
tickwire binary (TICKWIRE_BIN, else target/release/tickwire), and a router
on a free loopback port."""

import os
import pathlib
import shutil
import subprocess
import sys
import threading
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def target() -> pathlib.Path:
    """target/PROFILE: where the tickwire binary and libtickwire.so are
    (TICKWIRE_PROFILE, `make python-test` sets it; else release)."""
    return ROOT / "target" / os.environ.get("TICKWIRE_PROFILE", "release")


def tickwire_bin() -> str:
    path = os.environ.get("TICKWIRE_BIN") or str(target() / "tickwire")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path}: no tickwire binary (cargo build --release, or set TICKWIRE_BIN)")
    return path


@pytest.fixture
def shm_dir():
    """A tickwire directory in /dev/shm, removed afterwards."""
    d = pathlib.Path("/dev/shm") / f"tickwire-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Router:
    """`tickwire router` on tcp://127.0.0.1:0 with its own directory."""

    def __init__(self, dir: pathlib.Path, *args: str, listen: str = "tcp://127.0.0.1:0"):
        self.dir = dir
        self.proc = subprocess.Popen(
            [tickwire_bin(), "--dir", str(dir), "router", "--listen", listen, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.uri = None
        for line in self.proc.stderr:
            # router listening: ipc in DIR, tcp://127.0.0.1:PORT (...)
            if line.startswith("router listening: "):
                self.uri = next(w for w in line.split() if w.startswith("tcp://")).rstrip(",")
                break
        if self.uri is None:
            self.proc.kill()
            raise RuntimeError(f"the router exited before listening: {self.proc.wait()}")
        # Its log goes on: drained, or a full pipe would stop the router.
        self.log = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def router(shm_dir):
    r = Router(shm_dir)
    yield r
    r.stop()


def python_child(*args: str, **kw) -> subprocess.Popen:
    """This interpreter running `args` (a script and its arguments)."""
    return subprocess.Popen([sys.executable, *args], **kw)
