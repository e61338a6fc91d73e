"""``torchdoctor analyze`` as a command: its options, ``run(options)`` (the report, as data),
and ``emit(report, options)`` (printing and files, through ``report/``).

The command line (``cli.py``) only builds :class:`AnalyzeOptions`; ``api.analyze`` (a floor
above) wraps the same ``analyze_path`` in its public ``Report``. Imports stay inside the functions: ``analyze`` never imports torch
and starts decoding the trace before the analyses are imported.
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up); the report type stays a string (imported late).

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

from torchdoctor import exits

if TYPE_CHECKING:
    from torchdoctor.report.model import Report


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class AnalyzeOptions(NamedTuple):
    """One ``analyze`` run (the defaults are the command line's)."""

    path: str
    """A trace (``.json`` / ``.json.gz``), a folder of per-rank traces, or a check run folder."""
    json_path: str | None = None
    """``--json [PATH]``: the JSON report on standard output (``-``) or in a file."""
    top: int = 10
    """Rows in the kernel and operator tables."""
    jobs: int | None = None
    """A folder of ranks: worker processes (None: the CPUs)."""
    scheduler: str | None = None
    """A folder of ranks: a Dask scheduler's address."""
    dask: bool = False
    """A folder of ranks: a local Dask cluster."""
    html_path: str | None = None
    export_trace: str | None = None
    """Also write the trace with torchdoctor's tracks, for ui.perfetto.dev."""


def check_outputs(o: AnalyzeOptions) -> None:
    """Every output path is checked before any work starts (a typo must not cost the work)."""
    from torchdoctor.inputs import output_path
    from torchdoctor.json_arg import json_target

    for path, what in ((o.html_path, "HTML report"), (o.export_trace, "exported trace")):
        if path:
            output_path(path, what)
    json_target(o.json_path, [o.path])


def run(o: AnalyzeOptions) -> "Report":
    """The report of ``o.path`` (its outputs checked first)."""
    # The analyser does no matrix algebra: starting a BLAS thread pool would only cost start-up.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    with _no_gc():
        check_outputs(o)
        from torchdoctor.trace.prefetch import prefetch
    if os.path.isfile(o.path):
        # A helper process starts decoding the trace now, while the analyses are imported.
        prefetch(o.path)
    with _no_gc():
        # numpy from here, not from deep in the analyses' imports: CPython frees a 16 KB block
        # of its frame stack each time the stack drops back across the block's start, and
        # numpy's import sat across the first block's end there (500-3,400 mmap/munmap pairs
        # an analyze with 0-30 frames added above ``main``, strace; from here 2 up to 15).
        import numpy  # noqa: F401

        from torchdoctor.commands.analyze.trace import analyze_path

    return analyze_path(o.path, o.jobs, o.scheduler, o.dask)


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while the analyses are imported: importing creates
    only objects that live as long as the process (functions, classes, constants), and the
    collections it triggered among them were a few percent of ``analyze``'s CPU time.

    In the console script those objects are then frozen (``gc.freeze``): the first collections
    after the pause would otherwise walk every one of them (1.3% of an ``analyze`` of a small
    trace, callgrind). Never in a caller's process, whose later garbage would be frozen too."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            if exits.console_script:
                gc.freeze()
            gc.enable()


def emit(report: "Report", o: AnalyzeOptions) -> None:
    """Write the HTML and trace, then print the report (text, or only JSON with ``--json``).

    The files come first: a reader that closes standard output early (``| head``) ends the
    printing with a broken pipe, and the files must not depend on it."""
    from torchdoctor.json_arg import emit_json
    from torchdoctor.report.render import render_json

    if o.html_path or o.export_trace:
        from torchdoctor.report.outputs import write_extras

        write_extras(report, o.html_path, o.export_trace)
    if not emit_json(render_json(report), o.json_path):
        from torchdoctor.report.render import render_text

        render_text(report, top=o.top)
