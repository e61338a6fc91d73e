"""Whose code is this frame? The user's, or a library's (torch, torchdoctor, an installed
package, the standard library).

Decided by the file's real path against the real install folders (``site.getsitepackages()``,
``sysconfig``'s library paths, torch's and torchdoctor's own folders), never by folder names: a
script kept in a folder called ``site-packages`` or ``torch`` is still the user's, and a venv
reached through a symlink is still a library. Plain Python, no torch import.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import site
import sys
import sysconfig

USER = "user"
"""The label of the user's own code."""

# Generated code that belongs to a library: FX graphs, dynamo's resume functions, frozen modules.
_GENERATED_LIBRARY = ("<eval_with_key", "<frozen ", "<torch_package", "<__array_function__")


def _real(path: str) -> str:
    return os.path.realpath(path).rstrip(os.sep) + os.sep


def _package_dir(module: str) -> str | None:
    """The folder of package ``module``, imported or not: the watcher is built before the
    script imports torch, and torch's files must still be told from another package's."""
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(module)  # finds, never imports
            path = spec.origin if spec is not None else None
    return _real(os.path.dirname(path)) if path else None


class CodePaths:
    """Labels a code object's file: ``"user"``, ``"torch"``, ``"torchdoctor"``,
    ``"stdlib:json"``, ``"pkg:lightning"``... One ``realpath`` per file, then a dict lookup."""

    def __init__(self, extra_library_dirs: tuple[str, ...] = ()) -> None:
        named: list[tuple[str, str]] = []
        for module in ("torchdoctor", "torch"):
            d = _package_dir(module)
            if d:
                named.append((d, module))
        self._named = sorted(named, key=lambda kv: -len(kv[0]))
        packages = {_real(p) for p in _site_dirs()} | {_real(p) for p in extra_library_dirs}
        stdlib = {_real(p) for p in _stdlib_dirs()} - packages
        self._packages = sorted(packages, key=len, reverse=True)
        self._stdlib = sorted(stdlib, key=len, reverse=True)
        self._cache: dict[str, str] = {}
        self._detail_cache: dict[str, str] = {}
        self._torch_dir = next((d for d, name in named if name == "torch"), "\0")

    def label(self, filename: str) -> str:
        """The owner of ``filename`` (cached)."""
        got = self._cache.get(filename)
        if got is None:
            got = self._cache[filename] = self._classify(filename)
        return got

    def detail(self, filename: str) -> str:
        """``label``, with torch's files told apart by their top module (``torch:nn``,
        ``torch:optim``, ``torch:_tensor_str``): framework overhead (module calls, optimizer
        loops) is not the same as torch formatting a tensor for ``print``."""
        got = self._detail_cache.get(filename)
        if got is None:
            got = self.label(filename)
            if got == "torch" and not filename.startswith("<"):
                rel = _real(filename).rstrip(os.sep)[len(self._torch_dir) :]
                got = "torch:" + _top(rel) if rel else got
            self._detail_cache[filename] = got
        return got

    def is_user(self, filename: str) -> bool:
        """True for the user's own code."""
        return self.label(filename) == USER

    def _classify(self, filename: str) -> str:
        if filename.startswith("<"):
            if filename.startswith(_GENERATED_LIBRARY):
                return "torch" if filename.startswith(("<eval_with_key", "<torch")) else "stdlib"
            return USER  # <string>, <stdin>, a notebook cell
        path = _real(filename).rstrip(os.sep)
        for folder, name in self._named:
            if path.startswith(folder):
                return name
        for folder in self._packages:
            if path.startswith(folder):
                return "pkg:" + _top(path[len(folder) :])
        for folder in self._stdlib:
            if path.startswith(folder):
                return "stdlib:" + _top(path[len(folder) :])
        return USER


def _top(rel: str) -> str:
    first = rel.split(os.sep, 1)[0]
    return first[:-3] if first.endswith(".py") else first


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    with contextlib.suppress(Exception):  # some embedded interpreters lack them
        dirs.extend(site.getsitepackages())
    with contextlib.suppress(Exception):
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    dirs.extend(paths[k] for k in ("purelib", "platlib") if k in paths)
    return [d for d in dirs if d and os.path.isdir(d)]


def _stdlib_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib") if k in paths]
    dirs.append(os.path.dirname(os.__file__))
    return [d for d in dirs if d and os.path.isdir(d)]
