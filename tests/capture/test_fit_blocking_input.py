"""check's view of an ``input-pipeline`` finding through the line table: a step that opens in a
sleep or a blocking I/O call at the user's line is told to remove or overlap that wait, never
to build a DataLoader; Python making the batch keeps the input fix."""

from __future__ import annotations

from torchdoctor.capture.fit import _input_pipeline, fit_to_run
from torchdoctor.record.lines import LineTable
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec


def _finding() -> Finding:
    s = spec("input-pipeline")
    return Finding(
        "input-pipeline",
        "Input pipeline: ...",
        "critical",
        8.0,
        0.8,
        {"mean_step_ms": 10.0, "dataloader_in_trace": False},
        s.fix(),
        s.explanation,
        s.doc_url,
        where=[],
    )


def _record(under: dict[str, float], site: str = "train.py:8", function: str = "") -> LineTable:
    row = {"site": site, "function": function, "under": under}
    return LineTable.from_dict({"rows": [row]})


def test_a_sleep_at_the_step_start_gets_the_wait_fix_at_its_line() -> None:
    f = _input_pipeline(_finding(), _record({"sleep/wait": 7.0, "Python": 1.0}))
    assert f is not None and f.where == ["train.py:8"]
    assert f.fix.startswith("# train.py:8: the step sleeps or waits") and "DataLoader" not in f.fix


def test_file_io_gets_the_io_fix() -> None:
    f = _input_pipeline(_finding(), _record({"I/O": 5.0, "Python": 2.0}))
    assert f is not None and "file or socket I/O" in f.fix


def test_python_making_the_batch_keeps_the_input_fix() -> None:
    f = _input_pipeline(_finding(), _record({"Python": 7.0, "sleep/wait": 1.0}))
    assert f is not None and "DataLoader" in f.fix


def test_a_sleep_in_a_helper_the_loop_calls_is_titled_as_a_sleep() -> None:
    # a time.sleep inside fetch_batch(), called from the loop: the sampled line is the sleep's
    # own line in the helper, and the title says the loop sleeps there, not that it makes a batch
    record = _record({"sleep/wait": 5.0, "Python": 1.0}, "/w/helper_sleep.py:10", "fetch_batch")
    f = _input_pipeline(_finding(), record)
    assert f is not None and f.where == ["/w/helper_sleep.py:10"]
    assert (
        f.title
        == "Input pipeline: ...; at helper_sleep.py:10 (fetch_batch) the loop sleeps or waits"
    )


def test_python_making_the_batch_is_titled_as_python_at_its_line() -> None:
    f = _input_pipeline(
        _finding(), _record({"Python": 7.0, "I/O": 2.0}, "/w/train.py:8", "<module>")
    )
    assert f is not None and f.title.endswith("; at train.py:8 the loop runs Python")


def test_a_step_timed_by_the_models_calls_has_no_input_pipeline() -> None:
    # steps by forward open inside the model call (ticked when the next call begins): the
    # gap before its first operator is the module's Python, as in a TransformerEncoder's checks
    # before its fused layer; the same finding on optimizer steps stays
    lines = {"rows": [{"site": "score.py:15", "function": "score", "under": {"Python": 7.0}}]}
    for source, kept in (("forward", False), ("optimizer", True)):
        record = {"steps": {"source": source, "step_ms": [10.0] * 6}, "lines": lines}
        ids = [f.id for f in fit_to_run([_finding()], record)]
        assert ("input-pipeline" in ids) is kept, (source, ids)
