#!/usr/bin/python3
"""Writes the manifest of an engine's interface that Maru's connectors follow.

The engines (vLLM, SGLang, LMCache) and the original Maru cannot be installed
here, so their interface is kept as facts, read from their source at a
pinned commit: every class in the files Maru meets (its bases, each method's
kind, parameters, defaults and annotations, each field), and what the
engine's code that calls Maru uses of it (attributes read on each receiver).
python/tests/test_contracts.py holds Maru's classes against these files.

    scripts/engine-manifest.py ENGINE --source DIR [--commit SHA]
    scripts/engine-manifest.py ENGINE --git MIRROR --commit SHA

DIR holds the engine's tree (or just the files listed below) at the commit;
MIRROR is a git directory (`fetch` brings one) read with `git show`. The
manifest goes to python/contracts/ENGINE.json; what changed against the
committed one is printed, so bumping the pinned commit is this one command
and a look at its output. --check only prints the changes (exit 1 if any).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "python" / "contracts"

# For each engine: the files whose classes Maru implements or uses
# ("interface"), and the files of the engine that call Maru ("callers"),
# with the receivers whose attributes are recorded there.
ENGINES: Dict[str, Dict[str, Any]] = {
    "vllm": {
        "repository": "vllm-project/vllm",
        "interface": [
            "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
            "vllm/distributed/kv_transfer/kv_connector/v1/metrics.py",
            "vllm/distributed/kv_transfer/kv_connector/factory.py",
            "vllm/config/kv_transfer.py",
        ],
        "callers": {},
    },
    "sglang": {
        "repository": "sgl-project/sglang",
        "interface": [
            "python/sglang/srt/mem_cache/hicache_storage.py",
            "python/sglang/srt/mem_cache/storage/backend_factory.py",
        ],
        "callers": {},
    },
    "lmcache": {
        "repository": "LMCache/LMCache",
        "interface": [
            "lmcache/v1/storage_backend/abstract_backend.py",
            "lmcache/v1/memory_management.py",
            "lmcache/utils.py",
        ],
        # LMCache's own maru backend, built from `maru_path`: what it calls on
        # the maru package (MaruHandler, MaruConfig, CxlMemoryAdapter, handles).
        "callers": {
            "lmcache/v1/storage_backend/maru_backend.py": None,
            # CreateStorageBackends (maru_path) and the storage plugin launcher.
            "lmcache/v1/storage_backend/__init__.py": None,
        },
    },
    "maru": {
        "repository": "xcena-dev/maru",
        "interface": [
            "maru_common/config.py",
            "maru_handler/handler.py",
            "maru_handler/memory/types.py",
            "maru_vllm/connector.py",
            "maru_sglang/maru_storage.py",
            "maru_sglang/config.py",
            "maru_lmcache/adapter.py",
        ],
        "callers": {},
    },
}


def _text(node: Optional[ast.AST]) -> Optional[str]:
    return None if node is None else ast.unparse(node)


def _decorators(fn: ast.AST) -> List[str]:
    return [ast.unparse(d) for d in getattr(fn, "decorator_list", [])]


def _params(args: ast.arguments) -> List[Dict[str, Any]]:
    """Each parameter in order: name, kind, annotation, default."""
    out: List[Dict[str, Any]] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (a, d) in enumerate(zip(positional, defaults)):
        kind = "positional_only" if i < len(args.posonlyargs) else "positional_or_keyword"
        out.append(_param(a, kind, d))
    if args.vararg:
        out.append(_param(args.vararg, "var_positional", None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(_param(a, "keyword_only", d))
    if args.kwarg:
        out.append(_param(args.kwarg, "var_keyword", None))
    return out


def _param(a: ast.arg, kind: str, default: Optional[ast.AST]) -> Dict[str, Any]:
    p: Dict[str, Any] = {"name": a.arg, "kind": kind}
    if a.annotation is not None:
        p["annotation"] = _text(a.annotation)
    if default is not None:
        p["default"] = _text(default)
    return p


def _method(fn: ast.AST) -> Dict[str, Any]:
    decorators = _decorators(fn)
    kind = "method"
    for d in decorators:
        if d in ("classmethod", "staticmethod", "property"):
            kind = d
        elif d.endswith(".setter"):
            kind = "setter"
    m: Dict[str, Any] = {
        "kind": kind,
        "abstract": any(d.split(".")[-1] == "abstractmethod" for d in decorators),
        "async": isinstance(fn, ast.AsyncFunctionDef),
        "params": _params(fn.args),
    }
    if fn.returns is not None:
        m["returns"] = _text(fn.returns)
    return m


def _class(node: ast.ClassDef, path: str) -> Dict[str, Any]:
    methods: Dict[str, Any] = {}
    fields: Dict[str, Any] = {}
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            m = _method(item)
            # A property's setter keeps the property's entry.
            if m["kind"] == "setter":
                methods.setdefault(item.name, {})["setter"] = True
            else:
                methods[item.name] = m
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            fields[item.target.id] = {"annotation": _text(item.annotation),
                                      **({"default": _text(item.value)} if item.value else {})}
        elif isinstance(item, ast.Assign):
            for t in item.targets:
                if isinstance(t, ast.Name):
                    fields[t.id] = {"value": _text(item.value)}
    return {
        "file": path,
        "bases": [_text(b) for b in node.bases],
        "keywords": {k.arg: _text(k.value) for k in node.keywords if k.arg},
        "decorators": _decorators(node),
        "methods": methods,
        "fields": fields,
    }


def interface_of(source: str, path: str) -> Dict[str, Any]:
    """Every class (top level) and function of one file."""
    tree = ast.parse(source, filename=path)
    classes: Dict[str, Any] = {}
    functions: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = _class(node, path)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = {"file": path, **_method(node)}
    return {"classes": classes, "functions": functions}


def uses_of(source: str, path: str) -> Dict[str, Any]:
    """What a calling file uses: modules and names it imports, and for each
    receiver expression (``self._handler``, ``handle``), the attributes it
    reads on it, with the keyword arguments of the calls made through them."""
    tree = ast.parse(source, filename=path)
    imports: Dict[str, List[str]] = {}
    receivers: Dict[str, Dict[str, List[str]]] = {}
    calls: Dict[str, List[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imports.setdefault(node.module, []).extend(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                imports.setdefault(a.name, [])
        elif isinstance(node, ast.Attribute):
            receiver = ast.unparse(node.value)
            receivers.setdefault(receiver, {}).setdefault(node.attr, [])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = ast.unparse(node.func.value)
            kws = receivers.setdefault(receiver, {}).setdefault(node.func.attr, [])
            kws.extend(k.arg for k in node.keywords if k.arg and k.arg not in kws)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            kws = calls.setdefault(node.func.id, [])
            kws.extend(k.arg for k in node.keywords if k.arg and k.arg not in kws)
    return {
        "file": path,
        "imports": {m: sorted(set(n)) for m, n in sorted(imports.items())},
        # Calls of plain names (constructors of Maru's classes, a plugin
        # class held in a variable), with the keyword arguments they pass.
        "calls": {f: sorted(k) for f, k in sorted(calls.items())},
        "receivers": {r: {a: sorted(k) for a, k in sorted(attrs.items())}
                      for r, attrs in sorted(receivers.items())},
    }


def reader(args: argparse.Namespace) -> Callable[[str], str]:
    if args.git:
        def from_git(path: str) -> str:
            return subprocess.run(["git", "-C", args.git, "show", f"{args.commit}:{path}"],
                                  check=True, capture_output=True, text=True).stdout
        return from_git
    root = Path(args.source)
    return lambda path: (root / path).read_text()


def commits_of(args: argparse.Namespace, paths: List[str]) -> Dict[str, str]:
    """The commit each file was read at: --commit, or DIR/COMMITS.txt
    ("path commit" lines) where the files come from different commits."""
    listed: Dict[str, str] = {}
    if args.source and (Path(args.source) / "COMMITS.txt").exists():
        for line in (Path(args.source) / "COMMITS.txt").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                listed[parts[0]] = parts[1]
    out = {}
    for p in paths:
        commit = listed.get(p) or args.commit
        if not commit:
            sys.exit(f"engine-manifest: no commit for {p}: give --commit or list it in COMMITS.txt")
        out[p] = commit
    return out


def manifest(args: argparse.Namespace) -> Dict[str, Any]:
    spec = ENGINES[args.engine]
    read = reader(args)
    paths = spec["interface"] + list(spec["callers"])
    files = commits_of(args, paths)
    classes: Dict[str, Any] = {}
    functions: Dict[str, Any] = {}
    for path in spec["interface"]:
        found = interface_of(read(path), path)
        for name, c in found["classes"].items():
            classes[f"{path}:{name}"] = c
        for name, f in found["functions"].items():
            functions[f"{path}:{name}"] = f
    callers = {path: uses_of(read(path), path) for path in spec["callers"]}
    return {
        "engine": args.engine,
        "repository": spec["repository"],
        "files": files,
        "classes": classes,
        "functions": functions,
        "callers": callers,
    }


def changes(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """What a reader must look at after a bump: commits, classes, methods."""
    out = []
    for path, commit in new["files"].items():
        if old.get("files", {}).get(path) != commit:
            out.append(f"file {path}: {old.get('files', {}).get(path)} -> {commit}")
    for section in ("classes", "functions"):
        before, after = old.get(section, {}), new[section]
        for name in sorted(set(before) | set(after)):
            if name not in after:
                out.append(f"{section[:-1] if section == 'functions' else 'class'} gone: {name}")
            elif name not in before:
                out.append(f"new {section[:-2] if section == 'classes' else 'function'}: {name}")
            elif section == "classes":
                out.extend(_class_changes(name, before[name], after[name]))
            elif before[name] != after[name]:
                out.append(f"function changed: {name}")
    for path in sorted(set(old.get("callers", {})) | set(new["callers"])):
        if old.get("callers", {}).get(path) != new["callers"].get(path):
            out.append(f"what {path} uses changed")
    return out


def _class_changes(name: str, a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    out = []
    if a["bases"] != b["bases"]:
        out.append(f"{name}: bases {a['bases']} -> {b['bases']}")
    for m in sorted(set(a["methods"]) | set(b["methods"])):
        if m not in b["methods"]:
            out.append(f"{name}.{m}: removed")
        elif m not in a["methods"]:
            out.append(f"{name}.{m}: added {json.dumps(b['methods'][m])}")
        elif a["methods"][m] != b["methods"][m]:
            out.append(f"{name}.{m}: {json.dumps(a['methods'][m])} -> {json.dumps(b['methods'][m])}")
    if a["fields"] != b["fields"]:
        out.append(f"{name}: fields {sorted(a['fields'])} -> {sorted(b['fields'])}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=sorted(ENGINES))
    ap.add_argument("--source", help="a directory holding the engine's files at the commit")
    ap.add_argument("--git", help="a git directory of the engine (read with git show)")
    ap.add_argument("--commit", help="the commit the files are read at")
    ap.add_argument("--check", action="store_true", help="print the changes only")
    args = ap.parse_args()
    if bool(args.source) == bool(args.git):
        ap.error("give exactly one of --source and --git")
    if args.git and not args.commit:
        ap.error("--git needs --commit")
    try:
        new = manifest(args)
    except (OSError, subprocess.CalledProcessError, SyntaxError) as e:
        print(f"engine-manifest: {e}", file=sys.stderr)
        return 1
    out = OUT / f"{args.engine}.json"
    old = json.loads(out.read_text()) if out.exists() else {}
    diff = changes(old, new)
    for line in diff:
        print(line)
    if args.check:
        return 1 if diff else 0
    OUT.mkdir(parents=True, exist_ok=True)
    # Source order is kept: it is a fact too (dataclass fields, enum values).
    out.write_text(json.dumps(new, indent=1) + "\n")
    print(f"engine-manifest: wrote {out.relative_to(ROOT)} ({len(diff)} changes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
