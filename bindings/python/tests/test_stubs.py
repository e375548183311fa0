"""The type stubs (python/tickwire/_tickwire.pyi) say what the module has:
every class, exception and method in one is in the other."""

import ast
import inspect

import tickwire
from tickwire import _tickwire
from conftest import ROOT

STUBS = ROOT / "bindings/python/python/tickwire/_tickwire.pyi"


def stubbed():
    """{class name: {member names}} of the stubs."""
    out = {}
    for node in ast.parse(STUBS.read_text()).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.target.id if isinstance(n, ast.AnnAssign) else n.name
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AnnAssign))
            }
    return out


def test_every_class_of_the_module_is_stubbed_and_no_more():
    module = {n for n, v in vars(_tickwire).items() if inspect.isclass(v)}
    assert set(stubbed()) == module
    assert set(tickwire.__all__) == module | {"__version__"}


def test_every_stubbed_member_exists_and_every_public_one_is_stubbed():
    for name, members in stubbed().items():
        cls = getattr(_tickwire, name)
        public = {m for m in vars(cls) if not m.startswith("_")}
        if issubclass(cls, BaseException):
            assert members == set(), name
            continue
        dunder = {m for m in members if m.startswith("__")}
        assert members - dunder == public, name
        for m in dunder - {"__init__"}:
            assert hasattr(cls, m), f"{name}.{m}"
