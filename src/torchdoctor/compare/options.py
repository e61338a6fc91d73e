"""``compare``'s options, typed, with their defaults in one place: the command line takes its
defaults from here (``compare/cli.py``) and ``compare/cli.run`` reads only these fields."""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.compare.estimates import RUN_TO_RUN_PCT
from torchdoctor.compare.rerun_types import RerunOptions
from torchdoctor.errors import UserError

TOP = 10
"""Rows in each kernel and operator table."""


@dataclass(frozen=True)
class CompareOptions:
    """One ``compare`` run: BASE and NEW, how to judge them and where the report goes."""

    base: tuple[str, ...]
    """BASE's runs (traces, rank folders, run folders, tune results), or its one script."""
    new: tuple[str, ...]
    fail_pct: float | None = None
    """``--fail-if-slower PCT``: the gate (None: no gate, exit 0)."""
    json_path: str | None = None
    """``--json [PATH]``: the JSON comparison on standard output (``-``) or in a file."""
    top: int = TOP
    html_path: str | None = None
    job_steps: int | None = None
    """The job's length in steps: the verdict follows the time to that many steps."""
    run_noise_pct: float = RUN_TO_RUN_PCT
    """Run-to-run allowance when a side has one run."""
    rerun: RerunOptions | None = None
    """``--rerun``: BASE and NEW are one script each, run alternately with this plan."""
    script_args: tuple[str, ...] = ()
    """``--rerun``: the arguments given to both scripts."""

    def __post_init__(self) -> None:
        if self.rerun is not None and (len(self.base), len(self.new)) != (1, 1):
            raise UserError(
                f"--rerun takes two scripts, BASE and NEW (got {len(self.base) + len(self.new)}); "
                "their arguments go after --: compare --rerun a.py b.py -- --epochs 1"
            )
        if not self.base or not self.new:
            raise UserError("give at least one run on each side of --")

    @property
    def paths(self) -> list[str]:
        """Every input, BASE's first (what an output file must not overwrite)."""
        return [*self.base, *self.new]


def sides_of(
    sides: tuple[str, ...], after: int | None, rerun: bool
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """BASE, NEW and the scripts' arguments from the command line's paths, ``after`` of them
    following ``--``: ``A B``, ``A1 A2 -- B1 B2``, or with ``--rerun`` ``A.py B.py -- ARGS``
    (BASE, NEW, the scripts' arguments)."""
    if rerun:
        args = tuple(sides[len(sides) - after :]) if after else ()
        scripts = sides[: len(sides) - after] if after else sides
        return scripts[:1], scripts[1:], args  # CompareOptions refuses other than one a side
    if after is None:
        if len(sides) != 2:
            raise UserError(
                f"give BASE and NEW (got {len(sides)} paths); for several runs a side, "
                "separate the sides with --: compare A1 A2 A3 -- B1 B2 B3"
            )
        return sides[:1], sides[1:], ()
    return sides[: len(sides) - after], sides[len(sides) - after :], ()
