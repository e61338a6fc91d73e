"""Per-element Python loop lines of the line table (rules/loop_lines.py): what the line does
is read from its source, and a line with an operator-level cause is never one."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchdoctor.record.lines import LineRow, LineTable
from torchdoctor.rules.loop_lines import (
    code_kind,
    in_python_loop,
    loop_fix_at,
    top_loop_line,
    vectorise_fix,
)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("mask[b, t] = 1.0  # one element", ("mask", "mask")),
        ("attn[i][j] = -1e9", ("mask", "attn")),
        ("out[b, i] += out[b, i + 1]", ("accumulate", "out")),
        ("acc[i] = acc[i - 1] + x[i]", ("accumulate", "acc")),
        ("y[i] = x[i] * w[i]", ("element-write", "y")),
        ("for t in range(int(lengths[b])):", ("loop", "")),
        ("mask[:, :3] = 1.0", None),  # a slice: one operation for many elements
        ("mask[idx] = torch.arange(n)", ("element-write", "mask")),
        ("x = model(batch)", None),
        ("loss.backward()", None),
        ("mask[b, t] = (", None),  # a statement cut at the line's end
    ],
)
def test_code_kind(code: str, expected: tuple[str, str] | None) -> None:
    assert code_kind(code) == expected


def test_in_python_loop_reads_the_file(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text(
        "m[0] = 1\nfor i in range(3):\n    m[i] = 1\n    while m[i]:\n        m[i] -= 1\n"
    )
    assert in_python_loop(f"{src}:1") is False
    assert in_python_loop(f"{src}:3") is True
    assert in_python_loop(f"{src}:5") is True
    assert in_python_loop(f"{tmp_path / 'gone.py'}:3") is None


def _table(*rows: LineRow, step: float = 10.0) -> LineTable:
    return LineTable(rows=tuple(rows), ms_per_step=step, samples=40, steps=4)


def _row(site: str, code: str, ms: float, **kw: object) -> LineRow:
    return LineRow(
        site=site,
        function="f",
        code=code,
        self_ms=ms,
        inclusive_ms=ms,
        under=kw.get("under", {"Python": ms}),  # type: ignore[arg-type]
        ops=kw.get("ops", ()),  # type: ignore[arg-type]
        calls=kw.get("calls", (("", ms),)),  # type: ignore[arg-type]
    )


def test_top_loop_line_takes_the_largest_own_python_line(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text("for b in range(4):\n    for t in range(4):\n        mask[b, t] = 1.0\n")
    model = _row(
        f"{src}:9", "loss.backward()", 5.0, calls=(("torch:_tensor|Tensor.backward", 5.0),)
    )
    write = _row(
        f"{src}:3", "mask[b, t] = 1.0", 3.0, ops=(("aten::select", 0.4), ("aten::fill_", 0.2))
    )
    line = top_loop_line(_table(model, write))
    assert line is not None and line.site == f"{src}:3" and line.kind == "mask"
    assert line.share == pytest.approx(0.3)
    fix = vectorise_fix(line)
    assert "Vectorise this loop" in fix and "torch.arange" in fix and "masked_fill" in fix
    assert "torch.compile" not in fix and "fused" not in fix


def test_no_loop_line_below_the_share_or_with_a_heavy_operator(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text("for i in range(4):\n    y[i] = x[i] @ w\n")
    small = _row(f"{src}:2", "y[i] = x[i] @ w", 0.5)
    assert top_loop_line(_table(small)) is None  # 5% of the step
    heavy = _row(
        f"{src}:2",
        "y[i] = x[i] @ w",
        4.0,
        ops=(("aten::mm", 3.0),),
        under={"torch ops": 3.0, "Python": 1.0},
    )
    assert top_loop_line(_table(heavy)) is None  # the matmul is the line's cost


def test_a_single_write_outside_a_loop_is_no_loop(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text("mask[0, 0] = 1.0\n")
    assert top_loop_line(_table(_row(f"{src}:1", "mask[0, 0] = 1.0", 4.0))) is None
    assert loop_fix_at(f"{src}:1", "mask[0, 0] = 1.0") is None


def test_fix_speaks_to_what_the_line_does(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text("for i in range(9):\n    out[i] += out[i + 1]\n    x = f(i)\n")
    running = loop_fix_at(f"{src}:2", "out[i] += out[i + 1]")
    assert running is not None and "cumsum" in running and "s.py:2" in running
    header = loop_fix_at(f"{src}:1", "for i in range(9):")
    assert header is not None and "Move this Python loop into tensor operations" in header
    assert loop_fix_at(f"{src}:3", "x = f(i)") is None


def test_writes_into_python_lists_are_no_tensor_loop(tmp_path: Path) -> None:
    src = tmp_path / "s.py"
    src.write_text(
        "def f(ts, x):\n"
        "    hits = [0] * 100\n"
        "    seen: dict = {}\n"
        "    out = x.clone()\n"
        "    for t in ts:\n"
        "        hits[t] += 1\n"
        "        seen[t] = 1\n"
        "        out[t] += 1\n"
    )
    assert loop_fix_at(f"{src}:6", "hits[t] += 1") is None
    assert loop_fix_at(f"{src}:7", "seen[t] = 1") is None
    assert loop_fix_at(f"{src}:8", "out[t] += 1") is not None
