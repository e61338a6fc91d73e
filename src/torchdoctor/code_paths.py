"""Whose code is this file? The user's, or a library's: torch, torchdoctor, an installed package
(site-packages, a console script, or a known framework installed editable or from a source
tree), the standard library. The one answer every watcher, ``fix`` and the memory pages use.

Decided by the file's real path against the real install folders (``site.getsitepackages()``,
``sysconfig``'s paths, the folders the import system finds for torch, torchdoctor and the
frameworks in ``FRAMEWORKS``), never by folder names: a script kept in a folder called
``site-packages`` or ``torch`` is still the user's, and a venv reached through a symlink is
still a library. A file that is not on this machine (a stack recorded on another one, in a memory
snapshot) is judged by the standard install layout instead. Plain Python, no torch import; one
``realpath`` per file, then a dict lookup.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import site
import sys
import sysconfig
from typing import Literal

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""torchdoctor's own folder (as its frames name it): every file under it is torchdoctor's."""

USER = "user"
"""The label of the user's own code."""

Kind = Literal["user", "torch", "torchdoctor", "package", "stdlib"]
_KIND: dict[str, Kind] = {
    "user": "user",
    "torch": "torch",
    "torchdoctor": "torchdoctor",
    "pkg": "package",
    "stdlib": "stdlib",
}

FRAMEWORKS = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning_utilities",
    "torchmetrics",
    "transformers",
    "accelerate",
    "peft",
    "trl",
    "diffusers",
    "datasets",
    "deepspeed",
    "fairscale",
    "apex",
    "megatron",
    "composer",
    "ignite",
    "timm",
    "torchvision",
    "torchaudio",
    "torchtext",
    "torchtitan",
    "torchtune",
    "torchao",
    "torchrl",
    "xformers",
    "flash_attn",
    "triton",
    "hydra",
)
"""Packages whose folders are libraries wherever an install put them: a framework installed
editable (``pip install -e``) lives in its source tree, outside every site-packages folder."""

# Distribution names where they differ from the module's.
_DISTRIBUTION = {"megatron": "megatron-core", "hydra": "hydra-core", "ignite": "pytorch-ignite"}

# Generated code that belongs to a library: FX graphs, dynamo's resume functions, frozen modules.
_GENERATED_LIBRARY = ("<eval_with_key", "<frozen ", "<torch_package", "<__array_function__")
_SITE_NAMES = frozenset({"site-packages", "dist-packages"})
_PYTHON_DIR = re.compile(r"python\d+(\.\d+)?t?$")


def _real(path: str) -> str:
    return os.path.realpath(path).rstrip(os.sep) + os.sep


def _package_dirs(module: str) -> list[str]:
    """The folders of package ``module``, imported or not (found, never imported: the labeller
    is built before the script imports torch); none for a single-file module, whose folder is
    whatever folder holds it."""
    mod = sys.modules.get(module)
    paths = getattr(mod, "__path__", None)
    if paths is None:
        with contextlib.suppress(ImportError, ValueError, AttributeError):
            spec = importlib.util.find_spec(module)
            paths = spec.submodule_search_locations if spec is not None else None
    return [_real(p) for p in paths or () if os.path.isdir(p)]


def _installed_from(module: str) -> str | None:
    """The real folder an editable or local install of ``module``'s distribution was made from
    (its ``direct_url.json``), or None: a folder the import system finds outside site-packages
    is a framework's only when an install says so, never a user's folder named ``datasets``."""
    import importlib.metadata  # only for a framework found outside site-packages: 20+ ms
    import json
    import urllib.parse

    try:
        dist = importlib.metadata.distribution(_DISTRIBUTION.get(module, module))
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except (ImportError, ValueError, OSError, AttributeError):
        return None
    if not url.startswith("file://"):
        return None
    return _real(urllib.parse.unquote(urllib.parse.urlparse(url).path))


def _top(rel: str) -> str:
    first = rel.split(os.sep, 1)[0]
    return first[:-3] if first.endswith(".py") else first


class CodePaths:
    """Labels a code object's file: ``"user"``, ``"torch"``, ``"torchdoctor"``,
    ``"stdlib:json"``, ``"pkg:lightning"``... (``kind`` gives the owner without the name).
    ``frameworks``: the packages found through the import system (tests pass their own)."""

    def __init__(self, frameworks: tuple[str, ...] = FRAMEWORKS) -> None:
        folders: dict[str, str] = {}  # real folder -> a fixed label, or "pkg:"/"stdlib:" + top
        for d in _stdlib_dirs():
            folders[_real(d)] = "stdlib:"
        for d in _site_dirs():
            folders[_real(d)] = "pkg:"
        sites = tuple(folders)
        for name in frameworks:
            for d in _package_dirs(name):
                if d.startswith(sites) or d.startswith(_installed_from(name) or "\0"):
                    folders[d] = "pkg:" + name
        for d in _package_dirs("torch"):
            folders[d] = "torch"
        folders[_real(PACKAGE_DIR)] = "torchdoctor"
        self._folders = sorted(folders.items(), key=lambda kv: -len(kv[0]))  # innermost first
        self._torch_dir = next((d for d, label in self._folders if label == "torch"), "\0")
        self._cache: dict[str, str] = {}
        self._detail_cache: dict[str, str] = {}

    def label(self, filename: str) -> str:
        """The owner of ``filename`` (cached: a dict lookup after the first call)."""
        got = self._cache.get(filename)
        if got is None:
            got = self._cache[filename] = self._classify(filename)
        return got

    def kind(self, filename: str) -> Kind:
        """``label`` without the package's name: ``"package"`` for ``"pkg:lightning"``."""
        return _KIND[self.label(filename).split(":", 1)[0]]

    def is_user(self, filename: str) -> bool:
        """True for the user's own code."""
        return self.label(filename) == USER

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

    def _classify(self, filename: str) -> str:
        if filename.startswith("<"):
            if filename.startswith(_GENERATED_LIBRARY):
                return "torch" if filename.startswith(("<eval_with_key", "<torch")) else "stdlib"
            return USER  # <string>, <stdin>, a notebook cell
        path = _real(filename).rstrip(os.sep)
        for folder, label in self._folders:
            if path.startswith(folder):
                return label + _top(path[len(folder) :]) if label.endswith(":") else label
        return USER if os.path.exists(path) else _by_layout(path)


def _by_layout(path: str) -> str:
    """The owner of a file recorded on another machine, by the standard install layout: the
    folder after ``site-packages``/``dist-packages`` names the package, ``lib/pythonX.Y`` holds
    the standard library; anything else is the user's."""
    parts = path.split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in _SITE_NAMES:
            top = _top(parts[i + 1])
            return top if top in ("torch", "torchdoctor") else "pkg:" + top
    for i, part in enumerate(parts[1:-1], start=1):
        if parts[i - 1] == "lib" and _PYTHON_DIR.match(part):
            return "stdlib:" + _top(parts[i + 1])
    return USER


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    with contextlib.suppress(Exception):  # some embedded interpreters lack them
        dirs.extend(site.getsitepackages())
    with contextlib.suppress(Exception):
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    # "scripts": the console-script wrappers pip writes (``bin/torchdoctor``, ``bin/torchrun``)
    dirs.extend(paths[k] for k in ("purelib", "platlib", "scripts") if k in paths)
    return [d for d in dirs if d and os.path.isdir(d)]


def _stdlib_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib") if k in paths]
    dirs.append(os.path.dirname(os.__file__))
    return [d for d in dirs if d and os.path.isdir(d)]


@functools.lru_cache(maxsize=1)
def code_paths() -> CodePaths:
    """The process's labeller, built on first use and shared (one cache for every watcher)."""
    return CodePaths()
