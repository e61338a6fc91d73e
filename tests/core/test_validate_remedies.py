"""The paste rule of ``benchmarks/validate_remedies.py``: a printed remedy goes where its text
says (wrap the user's statement, replace the user's call, move the user's line out of its loop,
insert after the line it names) and the pasted program runs; what cannot be placed is never
pasted. Small scripts without torch, pasted and executed here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from validate_remedies import (  # noqa: E402
    RUNNER,
    NotMechanical,
    _cell,
    _paste_all,
    code_lines,
    harness_env,
    paste,
    pieces,
    places,
    same_remedy,
    summary,
    target_of,
)

SCRIPT = textwrap.dedent(
    """\
    import os

    STATE = {"mode": "on", "built": 0, "log": []}


    def build(n, workers=0):
        STATE["built"] += 1
        return [n, workers]


    class Step:
        def __call__(self, xs):
            with open(os.devnull) as f:
                total = sum(xs)
            return total


    def main():
        STATE["mode"] = "on"
        for i in range(3):
            if i >= 0:
                items = build(4)
            STATE["log"].append(Step()([i, 1]))
        return items


    RESULT = main()
    """
)


def run(source: str) -> dict:
    scope: dict = {"__name__": "__main__"}
    exec(compile(source, "pasted.py", "exec"), scope)
    return scope


def line_of(text: str) -> int:
    return next(i for i, ln in enumerate(SCRIPT.splitlines(), 1) if text in ln)


def test_a_call_rewritten_with_only_what_changes_replaces_the_users_call() -> None:
    n = line_of("items = build(4)")
    kind, out, at = paste(SCRIPT, f"build(4, workers=2)  # at s.py:{n}", n)
    assert kind == "replace" and at == [n]
    assert run(out)["RESULT"] == [4, 2]


def test_a_with_over_the_users_statement_wraps_it() -> None:
    n = line_of("total = sum(xs)")
    fix = f"with open(os.devnull):  # at s.py:{n}\n    total = sum(xs)\n# or something else"
    kind, out, at = paste(SCRIPT, fix, n)
    assert kind == "wrap" and "            with open(os.devnull):" in out.splitlines()[at[0] - 1]
    assert run(out)["STATE"]["log"] == [1, 2, 3]


def test_an_undo_goes_after_the_line_and_into_a_block_whose_header_it_names() -> None:
    n = line_of('STATE["mode"] = "on"')
    kind, out, at = paste(SCRIPT, f'STATE.update(mode="off")  # at s.py:{n}', n)
    assert kind == "insert" and at == [n + 1] and run(out)["STATE"]["mode"] == "off"
    # an assignment to the same target takes the line's place
    kind, out, at = paste(SCRIPT, f'STATE["mode"] = "off"  # at s.py:{n}', n)
    assert kind == "replace" and at == [n] and run(out)["STATE"]["mode"] == "off"
    n = line_of("with open(os.devnull) as f:")
    kind, out, at = paste(SCRIPT, 'STATE["log"].append(-1)', n)
    assert kind == "insert" and out.splitlines()[at[0] - 1].startswith(" " * 12 + "STATE")
    assert run(out)["STATE"]["log"] == [-1, 1, -1, 2, -1, 3]


def test_a_line_to_move_leaves_its_loop_and_its_block_keeps_a_pass() -> None:
    n = line_of("items = build(4)")
    fix = f"items = build(4)  # move this line before the loop: built once\n# (now at s.py:{n})"
    kind, out, at = paste(SCRIPT, fix, n)
    assert kind == "move" and out.splitlines()[at[0] - 1] == "    items = build(4)"
    scope = run(out)
    assert scope["STATE"]["built"] == 1 and scope["RESULT"] == [4, 0]
    with pytest.raises(NotMechanical, match="no loop"):  # an instruction, not code to paste
        n = line_of("return total")
        paste(SCRIPT, f"return total  # move this line before the loop\n# (now at s.py:{n})", n)


def test_advice_has_no_code_and_a_place_outside_the_users_files_is_not_pasted(
    tmp_path: Path,
) -> None:
    assert code_lines("# build it once, before the loop\n# (now at t.py:3)") == []
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert target_of("x = 1  # at /usr/lib/python3/site.py:10", [], tmp_path, script) == (
        "elsewhere"
    )
    # a report on another copy of the case names the same file here
    assert target_of("x = 1  # at /tmp/td-remedy-zz/train.py:7", [], tmp_path, script) == (
        tmp_path / "train.py",
        7,
    )
    assert target_of("x = 1", ["train.py:4"], tmp_path, script) == (tmp_path / "train.py", 4)
    assert target_of("torch.set_num_threads(4)  # at the top of the script", [], tmp_path, script)
    assert target_of("x = 1", [], tmp_path, script) == "unplaced"


def test_code_after_the_line_at_a_binding_is_inserted_after_it_never_replacing_it() -> None:
    """``build = wrap(build)  # after the line at ...`` rebinds the user's name: pasted in place
    of the assignment it would read a name nothing bound yet."""
    src = "def wrap(f):\n    return f\n\nbuild = len\nRESULT = build([1, 2])\n"
    fix = "build = wrap(build)  # after the line at t.py:4: one wrapper"
    kind, out, at = paste(src, fix, 4)
    assert kind == "insert" and at == [5]
    assert out.splitlines()[3] == "build = len"
    assert out.splitlines()[4].startswith("build = wrap(build)  # after")
    assert run(out)["RESULT"] == 2


def test_controls_run_with_the_environments_threads_and_mistakes_with_the_cases() -> None:
    """A control under the harness's forced one thread would carry a mistake of its own (idle
    cores, named by few-intra-op-threads): it runs as a user's script would; a mistake keeps
    its case's environment, a case about threads its own."""
    import heldout_cases
    import unlisted_cases

    control = next(c for c in heldout_cases.CASES if c.control)
    assert dict(control.env) == {"OMP_NUM_THREADS": "1"}  # the harness's default
    ran = harness_env(control)
    assert ran.env == () and ran.path == control.path and ran.control
    mistake = next(c for c in unlisted_cases.CASES if c.script == "eval_with_grad.py")
    assert harness_env(mistake) is mistake


def test_the_headline_counts_failures_clean_bills_and_noisy_controls() -> None:
    rem = {"kind": "insert", "runs": False, "executed": None, "gone": None, "error": "boom"}
    rows = [
        {"labelled": True, "control": False, "ids": ["a"], "named": True, "named_info": True,
         "remedies": [rem]},
        {"labelled": True, "control": False, "ids": [], "named": False, "named_info": False,
         "remedies": []},
        {"labelled": True, "control": True, "ids": ["b"], "named": False, "named_info": False,
         "remedies": [{**rem, "kind": "advice"}]},
    ]  # fmt: skip
    line = summary(rows)
    assert "1 remedies pasted, 1 fail to run" in line and "false clean bills 1" in line
    assert "noisy controls 1" in line and "named 1 of 2" in line


def test_a_fix_whose_statements_name_their_own_places_is_pasted_piece_by_piece(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    n = line_of("items = build(4)")
    fix = f"model = compile(model)  # no place of its own\nbuild(4, workers=3)  # at s.py:{n}: why"
    assert pieces(fix) == ["model = compile(model)  # no place of its own", fix.splitlines()[1]]
    kind, _path, out, at, place = _paste_all(fix, ["s.py:2"], tmp_path, script)
    assert kind == "replace" and at == [n] and place == f"s.py:{n} (1 of 2 pieces unplaced)"
    assert run(out)["RESULT"] == [4, 3]
    assert pieces("x = 1\ny = 2") == []  # one piece: pasted where the fix points


def test_code_before_the_line_at_a_call_goes_right_above_the_statement_holding_it(
    tmp_path: Path,
) -> None:
    """``mark_dynamic(x, 1)  # before the line at ...`` prepares the call on that line: pasted
    after it (or inside the called function) it would come too late."""
    src = "calls = []\nx = [1]\nRESULT = calls.append(len(x)) or calls\n"
    fix = "x.append(2)  # before the line at t.py:3 (the compiled model's call): why\n# or not"
    kind, out, at = paste(src, fix, 3)
    assert kind == "insert" and at == [3]
    assert out.splitlines()[2].startswith("x.append(2)") and run(out)["RESULT"] == [2]
    script = tmp_path / "t.py"
    script.write_text(src)
    assert target_of(fix, [], tmp_path, script) == (script, 3)
    # two pieces before the same line: both pasted, both above it, and both lines recorded
    two = "x.append(2)  # before the line at t.py:3\nx.append(3)  # before the line at t.py:3"
    kind, _path, out, at, _place = _paste_all(two, [], tmp_path, script)
    assert run(out)["RESULT"] == [3] and sorted(at) == [3, 4]
    assert out.splitlines()[4].startswith("RESULT")


def test_a_remedy_printed_again_at_the_line_it_was_pasted_at_is_the_same_remedy(
    tmp_path: Path,
) -> None:
    """After a paste the report's lines move: its place is read back on the script as it was,
    so the same fix printed again at the shifted line is the same remedy (the fix did not
    hold), and a different fix, or the same code somewhere else, is a next step."""
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    n = line_of('STATE["log"]')
    fix = f"x = 1  # before the line at s.py:{n}: 4 sizes"
    before_at = places(fix, [], tmp_path, script)
    assert before_at == [f"s.py:{n}"]
    _kind, path, out, _at, _place = _paste_all(fix, [], tmp_path, script)
    original = {path: path.read_text()}
    path.write_text(out)
    again = f"x = 1  # before the line at s.py:{n + 1}: 5 sizes (other numbers in its words)"
    after_at = places(again, [], tmp_path, script, original)
    assert after_at == before_at and same_remedy(fix, before_at, again, after_at)
    pasted_line = f"x = 1  # before the line at s.py:{n}"  # the pasted line: its place
    assert places(pasted_line, [], tmp_path, script, original) == before_at
    other = f"x = 2  # before the line at s.py:{n + 1}"
    assert not same_remedy(fix, before_at, other, places(other, [], tmp_path, script, original))
    moved = f"x = 1  # before the line at s.py:{n - 1}"
    assert not same_remedy(fix, before_at, moved, places(moved, [], tmp_path, script, original))
    assert not same_remedy(fix, before_at, "# words only: what is left", ["unplaced"])


def test_the_headline_tells_a_fix_that_did_not_hold_from_a_limit_left() -> None:
    rem = {"kind": "replace", "runs": True, "executed": True, "gone": False, "error": ""}
    rows = [
        {"labelled": True, "control": False, "ids": ["a"], "named": True, "named_info": True,
         "remedies": [{**rem, "left": "same remedy"}, {**rem, "left": "next step"},
                      {**rem, "left": "next step"}, {**rem, "gone": True, "left": None}, rem]},
    ]  # fmt: skip
    line = summary(rows)
    assert "4 leave the mistake (1 left, same remedy; 2 left, next step)" in line
    assert _cell({**rem, "left": "next step"}) == "ok, LEFT (next step)"
    assert _cell(rem) == "ok, LEFT"  # a row from before the column


def test_a_pasted_line_in_a_function_torch_compile_traced_executes(tmp_path: Path) -> None:
    """The line tracer never sees a compiled frame's lines (dynamo runs a graph in their place);
    the runner counts the lines of frames dynamo traced, not those of a compiled function never
    called, nor lines of the file that did not run."""
    pytest.importorskip("torch")
    script = tmp_path / "pasted.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch


            def step(x):
                y = x * 2  # pasted
                return y + 1


            def unused(x):
                z = x - 1  # pasted, compiled, never called
                return z


            fast = torch.compile(step, backend="eager")
            idle = torch.compile(unused, backend="eager")
            out = fast(torch.ones(3))
            assert out.tolist() == [3.0, 3.0, 3.0]
            if out.sum() < 0:
                print("never")  # pasted, never runs
            """
        )
    )
    lines = [5, 10, 19]
    hits = tmp_path / "hits.json"
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    proc = subprocess.run(
        [sys.executable, str(runner), str(script), json.dumps(lines), str(hits), str(script)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(hits.read_text()) == [5]
