"""What several commands declare alike, declared once: the context every command parses in, the
options that mean the same in each (``--html``, ``--top``, check's run folders), SCRIPT and its
own arguments, and options whose defaults come from an options dataclass.

Only click is imported here: ``torchdoctor --help`` loads this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "show_default": True}
"""Every command's context: ``-h`` is ``--help``, and each option's default (when it has one) is
shown in ``--help`` (a command run on its own, outside the group, gets the same)."""
SCRIPT_CONTEXT: dict[str, Any] = {
    **CONTEXT,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
}
"""``check`` and ``fix``: everything after SCRIPT is the script's own, passed on untouched."""
RUNS_FOLDER = "torchdoctor-runs"
"""Where ``check`` writes its run folders unless told (``--out``)."""


def option_from(defaults: object) -> Callable[..., Callable[[F], F]]:
    """``click.option`` with the default read from ``defaults``: the attribute named as the
    option's value is (``--max-rounds``: ``max_rounds``; ``"--timeout", "timeout_s"``:
    ``timeout_s``), so ``--help`` shows the default the command then uses."""

    def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
        names = [d for d in decls if d.isidentifier()]
        name = names[0] if names else decls[0].lstrip("-").replace("-", "_")
        return click.option(*decls, default=getattr(defaults, name), **attrs)

    return option


def html_option(what: str = "report", help: str | None = None) -> Callable[[F], F]:
    """``--html PATH`` (as ``html_path``): also write an HTML ``what``."""
    return click.option(
        "--html",
        "html_path",
        type=click.Path(path_type=str),
        help=help or f"Also write an HTML {what}.",
    )


def top_option(help: str, default: int = 10) -> Callable[[F], F]:
    """``--top N``: how many rows (or findings) the text report shows."""
    return click.option("--top", default=default, type=click.IntRange(1, 1000), help=help)


def runs_option(help: str) -> Callable[[F], F]:
    """``--out DIRECTORY`` (as ``out_dir``): where ``check``'s run folders go."""
    return click.option(
        "--out",
        "out_dir",
        default=RUNS_FOLDER,
        type=click.Path(path_type=str, file_okay=False),
        help=help,
    )


def script_arguments(required: bool = True) -> Callable[[F], F]:
    """SCRIPT (as ``script``) and the script's own arguments after it (as ``script_args``)."""
    script = click.argument(
        "script", required=required, type=click.Path(path_type=str, dir_okay=False)
    )
    rest = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
    return lambda f: script(rest(f))
