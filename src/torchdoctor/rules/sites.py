"""Source sites (``path:line``) as the user reads them."""

from __future__ import annotations

import os


def relative_site(site: str) -> str:
    """``/abs/dir/train.py:36`` as ``train.py:36`` when it lies under the working directory."""
    path, sep, line = site.rpartition(":")
    if not sep or not os.path.isabs(path):
        return site
    cwd = os.getcwd()
    return f"{os.path.relpath(path, cwd)}:{line}" if path.startswith(cwd + os.sep) else site


def short_site(site: str) -> str:
    """``/abs/dir/train.py:36`` as ``train.py:36`` (the file's name and the line)."""
    file, _, line = site.rpartition(":")
    return f"{file.rsplit('/', 1)[-1]}:{line}" if file else site
