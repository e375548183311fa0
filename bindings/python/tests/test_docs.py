"""Every Python block of docs/python.md runs as written (the router's
address replaced by the test router's)."""

import re
import subprocess
import sys

from conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs/python.md").read_text(), re.S)


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_docs_have_their_two_blocks():
    assert len(BLOCKS) == 2


def test_the_quick_start_prints_the_message():
    out = run(BLOCKS[0])
    assert out.returncode == 0, out.stderr
    assert out.stdout == "md/eu/VOD bid 101.25\n"


def test_the_router_client_example_gets_prices_and_answers_a_request(router):
    out = run(BLOCKS[1].replace("tcp://127.0.0.1:7600", router.uri))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "md/eu/VOD b'bid 101.25' [('Venue', 'XLON')]" in lines
    assert "md/eu/BP b'bid 4.80' None" in lines and "md/eu/BP b'bid 4.81' None" in lines
    assert "b'quote VOD 1000'" in lines
