"""Argument checks for ``torchdoctor check`` that click cannot make on its own.

Everything after SCRIPT belongs to the script, so click is told to pass unknown options
through; that also means a misspelt option before the script (``--stesp 3``) would be taken
for the script's name. These helpers tell the two apart and give ``--json`` an optional value.
"""

from __future__ import annotations

import difflib
import os
from typing import TYPE_CHECKING, Any

import click

from torchdoctor.errors import UserError
from torchdoctor.json_arg import value_options

if TYPE_CHECKING:
    from pathlib import Path

    from torchdoctor.capture.options import CheckOptions

VALUE_OPTIONS = (
    "--warmup",
    "--steps",
    "--clean-steps",
    "--out",
    "--top",
    "--rank-timeout",
    "--json",
    "--html",
    "--timeout",
    "--profile-memory-budget",
)
"""check's options that take a value (the next token), as declared in ``commands/check/cli.py``
(a test holds the two together; the command itself parses with what it declares)."""
FLAG_OPTIONS = (
    "--full",
    "--shapes",
    "--no-shapes",
    "--stack",
    "--no-stack",
    "--memory",
    "--no-memory",
    "-h",
    "--help",
)
JSON_STDOUT = "-"
"""``--json`` with no file (or ``--json -``): the report goes to standard output as JSON."""


def reject_option_as_script(script: str) -> None:
    """Raise ``UserError`` when SCRIPT is really an option check does not know."""
    if not script.startswith("-") or os.path.isfile(script):
        return
    name = script.split("=", 1)[0]
    close = difflib.get_close_matches(name, [*VALUE_OPTIONS, *FLAG_OPTIONS], n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UserError(
        f"no such option: {name}{hint} (check's options go before the script; "
        "see torchdoctor check --help)"
    )


def _json_takes_next(token: str | None) -> bool:
    # A bare --json is followed by the script (or another option), never by a .py report path;
    # `--json -` is the explicit spelling of the bare one.
    if token == JSON_STDOUT:
        return True
    return token is not None and not token.startswith("-") and not token.endswith(".py")


def normalize_args(args: list[str], value_options: tuple[str, ...] = VALUE_OPTIONS) -> list[str]:
    """``args`` with an explicit ``-`` after a bare ``--json`` (only before the script);
    ``value_options``: the command's options that take a value (``fix`` has more)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        out.append(tok)
        if tok == "--json":
            nxt = args[i + 1] if i + 1 < len(args) else None
            if not _json_takes_next(nxt):
                out.append(JSON_STDOUT)
                i += 1
                continue
        if tok in value_options and i + 1 < len(args):
            out.append(args[i + 1])
            i += 2
            continue
        if not tok.startswith("-") or tok == "--":  # the script: the rest is its own
            out.extend(args[i + 1 :])
            break
        i += 1
    return out


class ScriptCommand(click.Command):
    """``check`` and ``fix``: before SCRIPT, a bare ``--json`` gets its ``-``; the words that
    are an option's value are told by the options this command declares (none forgotten)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, normalize_args(args, tuple(value_options(self))))


def check_json_path(path: str | None) -> None:
    """Raise ``UserError`` for a ``--json`` file that cannot or must not be written."""
    if path is None or path == JSON_STDOUT:
        return
    if path.endswith(".py"):
        raise UserError(f"--json {path}: refusing to overwrite a Python file with the report")
    if os.path.isdir(path):
        raise UserError(f"--json {path}: is a folder; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UserError(f"--json {path}: no such folder {parent}")


def checked_outputs(json_path: str | None, html_path: str | None) -> tuple[str | None, str | None]:
    """``--json`` and ``--html`` files made absolute before the script runs (it may change its
    working directory) and checked writable (a typo must not cost a training run); ``-`` (JSON
    on stdout) and None stay as they are."""
    from torchdoctor.inputs import absolute_path, output_path

    if json_path and json_path != JSON_STDOUT:
        json_path = absolute_path(json_path, "JSON report")
        output_path(json_path, "JSON report")
    if html_path:
        html_path = absolute_path(html_path, "HTML report")
        output_path(html_path, "HTML report")
    return json_path, html_path


def check_options(
    caller: str,
    warmup_steps: int,
    profile_steps: int,
    out_dir: str | Path,
    full: bool,
    **options: Any,
) -> CheckOptions:
    """``CheckOptions`` from a Python caller's keywords (``check()``, the framework callbacks;
    the others are ``CheckOptions`` fields); an unknown one is a ``UserError`` naming ``caller``."""
    from torchdoctor.capture.options import CheckOptions

    try:
        return CheckOptions(
            warmup_steps=warmup_steps,
            profile_steps=profile_steps,
            full=full,
            out_dir=str(out_dir),
            **options,
        )
    except TypeError as exc:
        raise UserError(f"{caller}: {exc}") from None
