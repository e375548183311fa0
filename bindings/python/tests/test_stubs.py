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


def stub_params(fn: ast.FunctionDef):
    """[(name, default or inspect.Parameter.empty, keyword-only)] of a stub."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [inspect.Parameter.empty] * (len(pos) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = [(p.arg, d, False) for p, d in zip(pos, defaults)]
    kw = [inspect.Parameter.empty if d is None else ast.literal_eval(d) for d in a.kw_defaults]
    out += [(p.arg, d, True) for p, d in zip(a.kwonlyargs, kw)]
    return [p for p in out if p[0] != "self"]


def real_params(obj):
    sig = inspect.signature(obj)
    return [(p.name, p.default, p.kind == inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
            if p.name != "self"]


def test_every_stubbed_signature_is_the_real_one():
    checked = 0
    for node in ast.parse(STUBS.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_tickwire, node.name)
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef) or fn.decorator_list:
                continue  # properties
            if fn.name == "__init__":
                real = real_params(cls)
            elif fn.name.startswith("__"):
                continue
            else:
                real = real_params(getattr(cls, fn.name))
            stub = stub_params(fn)
            # A default pyo3 cannot render (Some(5.0)) reads as `...`.
            real = [(n, s[1] if d is Ellipsis else d, k) for (n, d, k), s in zip(real, stub)] + real[len(stub):]
            assert stub == real, f"{node.name}.{fn.name}"
            checked += 1
    assert checked > 20
