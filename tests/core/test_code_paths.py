"""Whose code is a file: the one labeller (``torchdoctor.code_paths``) every watcher, ``fix`` and
the memory pages use. Real folders decide, never folder names; a file recorded on another machine
is judged by the install layout its path shows."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
import torch

import torchdoctor
from torchdoctor import code_paths as cp
from torchdoctor.code_paths import USER, CodePaths, code_paths

TORCH_DIR = Path(torch.__file__).parent


def _file(path: Path, text: str = "") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_each_owner_has_its_label_and_kind(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    paths = CodePaths()
    cases = {
        _file(tmp_path / "train.py"): ("user", USER),
        str(TORCH_DIR / "nn" / "functional.py"): ("torch", "torch"),
        torchdoctor.__file__: ("torchdoctor", "torchdoctor"),
        json.__file__: ("stdlib", "stdlib:json"),
        os.__file__: ("stdlib", "stdlib:os"),
        lightning.__file__: ("package", "pkg:lightning"),
        str(Path(lightning.__file__).parent / "pytorch" / "trainer" / "trainer.py"): (
            "package",
            "pkg:lightning",
        ),
    }
    for filename, (kind, label) in cases.items():
        assert (paths.kind(filename), paths.label(filename)) == (kind, label), filename
    assert paths.is_user(_file(tmp_path / "train.py")) and not paths.is_user(torch.__file__)
    assert paths.detail(str(TORCH_DIR / "nn" / "functional.py")) == "torch:nn"
    assert paths.detail(str(TORCH_DIR / "_tensor_str.py")) == "torch:_tensor_str"


def test_symlinks_are_followed_both_ways(tmp_path: Path) -> None:
    paths = CodePaths()
    (tmp_path / "torch_link").symlink_to(TORCH_DIR)  # a library reached through a link
    assert paths.label(str(tmp_path / "torch_link" / "nn" / "functional.py")) == "torch"
    real = _file(tmp_path / "project" / "train.py")
    (tmp_path / "venv_link").mkdir()
    (tmp_path / "venv_link" / "train.py").symlink_to(real)  # a user's file linked anywhere
    assert paths.label(str(tmp_path / "venv_link" / "train.py")) == USER


def test_relative_paths_are_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(TORCH_DIR)
    assert CodePaths().label(os.path.join("nn", "functional.py")) == "torch"
    _file(tmp_path / "train.py")
    monkeypatch.chdir(tmp_path)
    assert CodePaths().label("train.py") == USER


@pytest.mark.parametrize(
    ("filename", "label"),
    [
        ("<string>", USER),  # python -c, exec of the user's text
        ("<stdin>", USER),
        ("<ipython-input-3-5f2a>", USER),  # a notebook cell
        ("<frozen runpy>", "stdlib"),
        ("<frozen importlib._bootstrap>", "stdlib"),
        ("<eval_with_key>.7", "torch"),  # an FX graph's generated forward
    ],
)
def test_pseudo_files(filename: str, label: str) -> None:
    assert CodePaths().label(filename) == label


def test_user_folders_named_like_install_folders_are_the_users(tmp_path: Path) -> None:
    paths = CodePaths()
    for folder in ("site-packages-notes", "site-packages", "dist-packages", "torch"):
        filename = _file(tmp_path / folder / "torch" / "train.py")
        assert paths.label(filename) == USER, filename


def _editable(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, *, dist: bool) -> str:
    """A package ``name`` in a source tree outside site-packages, importable as a
    ``pip install -e`` makes it (its folder on the path), with the install's metadata or not."""
    src = tmp_path / "src"
    filename = _file(src / name / "core.py", "X = 1\n")
    _file(src / name / "__init__.py")
    site = tmp_path / "site"
    site.mkdir()
    if dist:
        info = site / f"{name}-1.0.dist-info"
        _file(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        url = {"url": src.as_uri(), "dir_info": {"editable": True}}
        _file(info / "direct_url.json", json.dumps(url))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(src))
    importlib.invalidate_caches()
    return filename


def test_an_editable_framework_outside_site_packages_is_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filename = _editable(tmp_path, "fakefw", monkeypatch, dist=True)
    assert "site-packages" not in filename
    paths = CodePaths(frameworks=("fakefw",))
    assert (paths.label(filename), paths.kind(filename)) == ("pkg:fakefw", "package")
    assert CodePaths(frameworks=()).label(filename) == USER  # not a framework we know


def test_a_users_folder_named_like_a_framework_is_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``datasets/`` beside the script shadows nothing an install recorded: it is the user's.
    filename = _editable(tmp_path, "fakefw2", monkeypatch, dist=False)
    assert CodePaths(frameworks=("fakefw2",)).label(filename) == USER


@pytest.mark.parametrize(
    ("filename", "label"),
    [
        ("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", "torch"),
        (
            "/usr/local/lib/python3.10/dist-packages/lightning/pytorch/loops/loop.py",
            "pkg:lightning",
        ),
        ("/opt/py/lib/python3.12/site-packages/six.py", "pkg:six"),
        ("/usr/lib/python3.10/json/decoder.py", "stdlib:json"),
        ("/home/me/torch/train.py", USER),
        ("/home/me/site-packages-notes/train.py", USER),
        ("/work/model.py", USER),
    ],
)
def test_files_recorded_on_another_machine_follow_the_install_layout(
    filename: str, label: str
) -> None:
    assert not os.path.exists(filename)
    assert CodePaths().label(filename) == label


def test_a_label_is_a_dict_lookup_after_the_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert code_paths() is code_paths()  # one labeller (and one cache) per process
    paths = CodePaths()
    filename = str(TORCH_DIR / "nn" / "functional.py")
    assert paths.label(filename) == "torch"

    def no_more(path: str) -> str:
        raise AssertionError(f"resolved {path} again")

    monkeypatch.setattr(cp.os.path, "realpath", no_more)
    assert paths.label(filename) == "torch" and paths.kind(filename) == "torch"


def test_capture_fix_and_memory_give_the_same_answer(tmp_path: Path) -> None:
    from torchdoctor.capture.gpu_probe import user_frame
    from torchdoctor.capture.own_frames import is_ours
    from torchdoctor.fix import sources
    from torchdoctor.memory import frames

    lightning = pytest.importorskip("lightning")
    files = {
        _file(tmp_path / "site-packages-notes" / "train.py"): "user",
        torch.__file__: "torch",
        os.path.join(cp.PACKAGE_DIR, "capture", "syncs.py"): "torchdoctor",
        lightning.__file__: "package",
        json.__file__: "stdlib",
        "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py": "torch",
    }
    for filename, kind in files.items():
        user = kind == "user"
        assert code_paths().kind(filename) == kind, filename
        assert sources.is_library(filename) is not user, filename
        assert frames.is_library(filename) is not user, filename
        assert (user_frame([{"filename": filename, "line": 3}]) != "") is user, filename
        assert is_ours(f"{filename}:3") is (kind == "torchdoctor"), filename
