"""``--json [PATH]``, the same in every command: a bare ``--json`` (or ``--json -``) prints the
JSON on standard output instead of the text report; ``--json PATH`` (or ``--json=PATH``) writes
it to PATH and prints the text report as usual.

A bare ``--json`` is often followed by the command's input (``analyze --json trace.json.gz``), so
the next word is taken for PATH only when it cannot be the input: the command still has all its
inputs without it, and it is not an existing folder or input file (a file whose name does not end
in ``.json``, or a trace). And PATH is never one of the inputs. ``check`` and ``fix``, whose
script's own arguments follow the script, decide the same way by the script's ``.py`` name
(``commands/check/args.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from torchdoctor.errors import UserError

JSON_STDOUT = "-"
"""``--json`` with no file: the JSON goes to standard output."""
F = TypeVar("F", bound=Callable[..., Any])


def json_option(what: str = "the report", more: str = "", type: Any = None) -> Callable[[F], F]:
    """The ``--json [PATH]`` option, as ``json_path`` (None, ``"-"`` or a file name): its help
    says it writes ``what``; ``more`` ends that sentence."""
    return click.option(
        "--json",
        "json_path",
        default=None,
        type=type,
        metavar="[PATH]",
        help=f"Write {what} as JSON to PATH; a bare --json (or --json -) prints only the "
        f"JSON on standard output{more}.",
    )


def _looks_like_input(token: str) -> bool:
    from pathlib import Path  # here: pathlib (and urllib.parse under it) costs --help's start-up

    p = Path(token)
    if not p.exists():
        return False
    if p.is_dir() or not p.name.endswith(".json"):
        return True
    try:
        with p.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return True
    return b'"traceEvents"' in head


def _same_as_one_of(token: str, args: Sequence[str]) -> bool:
    if not os.path.exists(token):
        return False
    real = os.path.realpath(token)
    return any(a == token or (os.path.exists(a) and os.path.realpath(a) == real) for a in args)


def value_options(command: click.Command) -> set[str]:
    """The command's options that take a value (the next word), as it declares them."""
    names: set[str] = set()
    for p in command.params:
        if isinstance(p, click.Option) and not p.is_flag and not p.count:
            names.update(p.opts)
    return names


def _positionals(args: Sequence[str], value_options: set[str]) -> int:
    n, i = 0, 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            return n + len(args) - i - 1
        if tok in value_options:
            i += 2
            continue
        if not tok.startswith("-") or tok == "-":
            n += 1
        i += 1
    return n


def normalize_json(args: list[str], command: click.Command, needed: int) -> list[str]:
    """``args`` with the value of every bare ``--json`` written out (``-`` or the PATH that
    follows it), so click can parse ``--json`` as an option that takes a value."""
    values = value_options(command) - {"--json"}
    out = list(args)
    i = 0
    while i < len(out):
        tok = out[i]
        if tok == "--":
            break
        if tok in values:
            i += 2
            continue
        if tok == "--json":
            nxt = out[i + 1] if i + 1 < len(out) else None
            rest = out[:i] + out[i + 2 :]
            room = nxt is not None and not nxt.startswith("-")
            room = room and _positionals(rest, values) >= needed
            if room and nxt is not None and _same_as_one_of(nxt, rest):
                raise click.UsageError(f"--json {nxt}: that is an input; refusing to overwrite it")
            takes = nxt == JSON_STDOUT or (room and nxt is not None and not _looks_like_input(nxt))
            if not takes:
                out.insert(i + 1, JSON_STDOUT)
            i += 2
            continue
        i += 1
    return out


class JsonPathCommand(click.Command):
    """A command whose ``--json`` takes an optional PATH (see the module's docstring)."""

    json_inputs_needed = 1
    """How many input arguments the command needs (``compare``: two)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, normalize_json(args, self, self.json_inputs_needed))


class TwoInputJsonCommand(JsonPathCommand):
    json_inputs_needed = 2


def json_target(json_path: str | None, inputs: Sequence[str]) -> str | None:
    """Check PATH before any work (a typo must not cost the work): ``None`` and ``"-"`` pass;
    a file is refused when it is an input, a Python file, a folder or in no folder."""
    if json_path is None or json_path == JSON_STDOUT:
        return json_path
    from torchdoctor.inputs import output_path

    target = os.path.realpath(json_path)
    if any(os.path.exists(i) and os.path.realpath(i) == target for i in inputs):
        raise UserError(f"--json {json_path}: that is an input; refusing to overwrite it")
    if json_path.endswith(".py"):
        raise UserError(f"--json {json_path}: refusing to overwrite a Python file with JSON")
    output_path(json_path, "JSON report")
    return json_path


def emit_json(text: str, json_path: str | None) -> bool:
    """Print or write the JSON; True when it went to standard output (no text report then)."""
    if json_path is None:
        return False
    if json_path == JSON_STDOUT:
        click.echo(text)
        return True
    from torchdoctor.inputs import write_output

    write_output(json_path, text if text.endswith("\n") else text + "\n", "JSON report")
    click.echo(f"wrote {json_path}", err=True)
    return False


def json_safe(x: Any) -> Any:
    """``x`` with NaN and infinities as None (null): ``json.dumps`` then writes valid JSON."""
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x
