"""maru/_maru.pyi against the built extension: the stub lies next to it and
names what it defines, no more and no less, and each function, method and
property with the extension's own parameters, defaults and types (pybind11
writes them into the first line of each docstring)."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import pytest

from maru import _maru

STUB = Path(_maru.__file__).with_name("_maru.pyi")
# Dunder methods the extension defines and the stub must type.
DUNDERS = {"__init__", "__len__", "__getitem__", "__enter__", "__exit__"}


class Param(NamedTuple):
    name: str
    type: Optional[str]  # None: not written (self, *args)
    default: Optional[str]
    star: bool  # *args


class Sig(NamedTuple):
    params: Tuple[Param, ...]
    returns: str


def _split_top(text: str) -> List[str]:
    """Splits at the commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def native_sig(obj: object) -> Sig:
    """The signature pybind11 wrote into the docstring's first line."""
    first = (obj.__doc__ or "").lstrip().splitlines()[0]
    m = re.match(r"^\w*\((.*)\) -> (.*)$", first)
    assert m, f"no pybind11 signature in {first!r}"
    params = []
    for p in _split_top(m.group(1)):
        star = p.startswith("*")
        name, _, rest = p.lstrip("*").partition(":")
        type_, _, default = rest.partition("=")
        params.append(Param(name.strip(), type_.strip() or None, default.strip() or None, star))
    return Sig(tuple(params), m.group(2).strip())


def stub_sig(fn: ast.FunctionDef) -> Sig:
    a = fn.args
    args = a.posonlyargs + a.args
    defaults = [None] * (len(args) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    params = [Param(p.arg, p.annotation and ast.unparse(p.annotation), d, False)
              for p, d in zip(args, defaults)]
    if a.vararg:
        params.append(Param(a.vararg.arg, None, None, True))
    return Sig(tuple(params), ast.unparse(fn.returns) if fn.returns else "None")


class StubClass(NamedTuple):
    bases: List[str]
    methods: Dict[str, Sig]
    properties: Dict[str, str]


def read_stub() -> Tuple[Dict[str, str], Dict[str, Sig], Dict[str, StubClass]]:
    constants: Dict[str, str] = {}
    functions: Dict[str, Sig] = {}
    classes: Dict[str, StubClass] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.AnnAssign):
            constants[node.target.id] = ast.unparse(node.annotation)
        elif isinstance(node, ast.FunctionDef):
            functions[node.name] = stub_sig(node)
        elif isinstance(node, ast.ClassDef):
            cls = StubClass([ast.unparse(b) for b in node.bases], {}, {})
            for item in node.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                if any(ast.unparse(d) == "property" for d in item.decorator_list):
                    cls.properties[item.name] = ast.unparse(item.returns)
                else:
                    cls.methods[item.name] = stub_sig(item)
            classes[node.name] = cls
    return constants, functions, classes


def _norm(t: str) -> str:
    return t.replace("maru._maru.", "").replace("typing.", "").replace(" ", "").strip("\"'")


def compatible(native: Optional[str], stub: Optional[str], param: bool) -> bool:
    """Whether the stub's type says what pybind11's does, or more where
    pybind11 knows only that it takes an object, list or dict."""
    if native is None or stub is None:
        return False
    n, s = _norm(native), _norm(stub)
    if n in ("object", "handle"):
        return True
    if n in ("list", "dict", "tuple"):
        return s.lower().startswith(n)
    if param:  # a std::vector parameter converts any sequence
        s = s.replace("Sequence[", "List[")
    return n == s


def check_sig(where: str, native: Sig, stub: Sig, method: bool) -> None:
    n_params = native.params[1:] if method else native.params
    s_params = stub.params[1:] if method else stub.params
    assert [(p.name, p.star, p.default) for p in n_params] == \
        [(p.name, p.star, p.default) for p in s_params], where
    for n, s in zip(n_params, s_params):
        if not n.star:
            assert compatible(n.type, s.type, True), f"{where}: {n.name}: {n.type} vs {s.type}"
    assert compatible(native.returns, stub.returns, False), \
        f"{where} returns {native.returns}, the stub says {stub.returns}"


CONSTANTS, FUNCTIONS, CLASSES = read_stub()


def test_the_stub_lies_next_to_the_extension() -> None:
    assert STUB.is_file()


def test_the_stub_names_what_the_extension_defines() -> None:
    native = {n for n in dir(_maru) if not n.startswith("_")}
    assert native == set(CONSTANTS) | set(FUNCTIONS) | set(CLASSES)


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_constants(name: str) -> None:
    assert isinstance(getattr(_maru, name), getattr(builtins, CONSTANTS[name]))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions(name: str) -> None:
    check_sig(name, native_sig(getattr(_maru, name)), FUNCTIONS[name], method=False)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_classes(name: str) -> None:
    native, stub = getattr(_maru, name), CLASSES[name]
    for base in stub.bases:
        assert issubclass(native, getattr(builtins, base)), f"{name} is no {base}"
    own = {k: v for k, v in vars(native).items()
           if not k.startswith("_") or k in DUNDERS}
    # A class without py::init has pybind11's __init__ that refuses: no constructor.
    if not (getattr(own.get("__init__"), "__doc__", None) or "").startswith("__init__("):
        own.pop("__init__", None)
    properties = {k for k, v in own.items() if isinstance(v, property)}
    assert properties == set(stub.properties), name
    assert set(own) - properties == set(stub.methods), name
    for prop in properties:
        returns = native_sig(own[prop].fget).returns
        assert compatible(returns, stub.properties[prop], False), f"{name}.{prop}"
    for meth, sig in stub.methods.items():
        check_sig(f"{name}.{meth}", native_sig(own[meth]), sig, method=True)
