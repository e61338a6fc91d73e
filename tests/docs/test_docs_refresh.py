"""scripts/refresh_docs.py: blocks are found by their marker, compared by shape, rewritten in
place; and every marked block in README.md and docs/ still matches what its command prints."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("refresh_docs", ROOT / "scripts" / "refresh_docs.py")
assert _spec is not None and _spec.loader is not None
refresh = importlib.util.module_from_spec(_spec)
sys.modules["refresh_docs"] = refresh
_spec.loader.exec_module(refresh)

DOC = """# Title
<!-- refresh: echo hi -->
```
$ echo hi
steps (steady state) : 126  [host clock, cpu]
step time            : 14.00 ms median, IQR 121.12 ms
...
MFU                  : n/a
```

<!-- refresh: echo unmarked -->

```
not a block: a blank line separates it from the marker
```
"""

OUTPUT = [
    "steps (steady state) : 190  [host clock, cpu]",
    "step time            : 1.62 ms median, IQR 0.31 ms",
    "throughput           : 9,871.2 samples/s",
    "MFU                  : n/a",
]


def test_only_a_fence_directly_under_a_marker_is_a_block(tmp_path: Path) -> None:
    blocks = refresh.find_blocks(tmp_path / "x.md", DOC)
    assert len(blocks) == 1
    b = blocks[0]
    assert b.command == "echo hi" and (b.start, b.end) == (2, 8) and b.lines[0] == "$ echo hi"
    with pytest.raises(ValueError, match="never closed"):
        refresh.find_blocks(tmp_path / "x.md", "<!-- refresh: x -->\n```\nopen\n")


def test_new_numbers_match_but_new_labels_and_columns_do_not() -> None:
    block = refresh.find_blocks(Path("x.md"), DOC)[0].lines
    assert refresh.mismatch(block, OUTPUT) is None  # other numbers, an elided line: fine
    renamed = [line.replace("step time ", "step      ") for line in OUTPUT]
    assert refresh.mismatch(block, renamed) == "step time :"
    dropped = [line for line in OUTPUT if not line.startswith("MFU")]
    assert refresh.mismatch(block, dropped) == "MFU :"
    swapped = [OUTPUT[0], OUTPUT[3], OUTPUT[1]]  # order matters
    assert refresh.mismatch(block, swapped) is not None
    table = ["┃ # ┃ configuration ┃ step ms ┃", "│ 1 │ baseline      │ 16.9    │"]
    wider = ["┃ # ┃ configuration ┃ step ms ┃ rounds ┃", "│ 1 │ baseline │ 7.1 │ 12 │"]
    assert (
        refresh.mismatch(table, ["┃ # ┃ configuration  ┃ step ms  ┃", "│ 2 │ baseline │ 7.1 │"])
        is None
    )
    assert refresh.mismatch(table, wider) == "┃ # ┃ configuration ┃ step ms ┃"
    # Measured outcomes may change: which row won, what a trial decided.
    other_winner = ["┃ # ┃ configuration ┃ step ms ┃", "│ 1 │ optimizer_impl=fused ◀ best │ 9.9 │"]
    assert refresh.mismatch(table, other_winner) is None
    progress = [
        "trial 2 of ~6 [single] precision=bf16-mixed: 0.97x [0.62-1.03] vs baseline: undecided"
    ]
    decided = ["trial 2 of ~5 [single] precision=bf16-mixed: 0.12x [0.10-0.14] vs baseline: drop"]
    assert refresh.mismatch(progress, decided) is None
    assert refresh.mismatch(progress, ["trial 2 of ~5 [single] precision=fp16: drop"]) is not None
    # A ranked finding's grade follows its measured share: another grade, the same finding.
    finding = [" 1. critical the step waits 25.8 ms (93%) for each batch (num_workers=0)"]
    graded = [" 1. warning the step waits 12.1 ms (43%) for each batch (num_workers=0)"]
    assert refresh.mismatch(finding, graded) is None
    retitled = [" 1. warning the step waits 12.1 ms (43%) for every batch (num_workers=0)"]
    assert refresh.mismatch(finding, retitled) is not None
    assert refresh.mismatch(["critical path: 3 ms"], ["warning path: 3 ms"]) is not None


def test_rewrite_replaces_content_and_keeps_the_prompt_line(tmp_path: Path) -> None:
    path = tmp_path / "x.md"
    path.write_text(DOC, encoding="utf-8")
    blocks = refresh.find_blocks(path)
    refresh.rewrite(path, blocks, {blocks[0].start: ["new line 1", "new line 2  "]})
    text = path.read_text(encoding="utf-8")
    assert "```\n$ echo hi\nnew line 1\nnew line 2\n```" in text
    assert "IQR 121.12" not in text and "not a block" in text


def test_main_check_reports_a_stale_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "<!-- refresh: printf 'alpha 1\\nbeta 2\\n' -->\n```\nalpha 7\nbeta 9\n```\n"
        "<!-- refresh: printf 'alpha 1\\n' -->\n```\ngamma 3\n```\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(refresh, "ROOT", tmp_path)
    assert refresh.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "README.md:6" in err and "no longer printed: 'gamma #'" in err and ":1:" not in err
    assert refresh.main([]) == 0  # rewrite from the real output, then the check passes
    assert refresh.main(["--check"]) == 0
    assert "```\nalpha 1\n```" in (tmp_path / "README.md").read_text(encoding="utf-8")


ROUNDS = ("--prove", "--rerun", "torchdoctor tune ")
"""Commands that run rounds of fresh processes (``fix --prove``, ``compare --rerun``, ``tune``:
30-45 s each on a 2-core machine, mostly one core at a time). They start once the live scripts'
blocks are done (those run alone: a check's ranked findings follow its measured shares), two at
a time in threads (each a ``bash -c`` process; nothing of pytest is forked), beside the commands
that read a recorded file; their blocks are checked last. Their shapes do not rest on a quiet
machine: each decides on interleaved rounds (a 9x and a 2x gain here), and what a round or a
trial decided is no part of a block's shape."""
AT_ONCE = 2
RECORDED = ("../shared", "-m torchdoctor.rules.families")
"""Commands that read a recorded trace or snapshot, or print a table: no timing in their output."""


def _order(command: str) -> int:
    """Live scripts first (alone), then the recorded ones, the rounds last."""
    if any(m in command for m in ROUNDS):
        return 2
    return 1 if any(m in command for m in RECORDED) else 0


def _doc_blocks() -> list[object]:
    blocks = [b for p in refresh.doc_files() for b in refresh.find_blocks(p)]
    blocks.sort(key=lambda b: _order(b.command))  # stable: each group in the files' order
    return [pytest.param(b, id=f"{b.path.name}:{b.start}") for b in blocks]


@pytest.fixture(scope="module")
def outputs(request: pytest.FixtureRequest) -> Iterator[Callable[[str], list[str]]]:
    """Each command's output lines, run once however many blocks show it (tune's is shown
    twice). The rounds commands of the selected blocks start together (``AT_ONCE`` at a time)
    when the first block that is no live script asks; any other command runs when asked."""
    wanted = [
        item.callspec.params["block"].command
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    ]
    rounds = [c for c in dict.fromkeys(wanted) if _order(c) == 2]
    pool = ThreadPoolExecutor(max_workers=AT_ONCE)
    started: dict[str, Future[list[str]]] = {}
    done: dict[str, list[str]] = {}

    def run(command: str) -> list[str]:
        if _order(command) > 0 and not started:
            started.update({c: pool.submit(refresh.run, c, 900) for c in rounds})
        if command in started:
            return started[command].result()
        if command not in done:
            done[command] = refresh.run(command, 900)
        return done[command]

    yield run
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("block", _doc_blocks())
def test_every_marked_block_matches_its_command(
    block: object, outputs: Callable[[str], list[str]]
) -> None:
    if "../shared" in block.command and not (ROOT.parent / "shared").is_dir():  # type: ignore[attr-defined]
        pytest.skip("needs ../shared (real traces)")
    out = outputs(block.command)  # type: ignore[attr-defined]
    bad = refresh.mismatch(block.lines, out)  # type: ignore[attr-defined]
    assert bad is None, f"{block.command}: no longer printed: {bad!r}"  # type: ignore[attr-defined]
