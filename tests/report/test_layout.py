"""The terminal table layout on small hand-built tables: what gives way, and what never does."""

from __future__ import annotations

from torchdoctor.report.layout import Column, TableText, lines, middle
from torchdoctor.report.tables import kernel_signature, short_kernel

_COLS = (
    Column("name", right=False, flex="shorten"),
    Column("count"),
    Column("total ms"),
)


def _text(table: TableText, width: int) -> list[str]:
    return [line.plain for line in lines(table, width)]


def test_middle_keeps_head_and_tail() -> None:
    assert middle("abcdefghij", 5) == "ab…ij"
    assert middle("abcdefghij", 6) == "abc…ij"
    assert middle("abc", 5) == "abc"


def test_a_long_name_gives_way_and_the_numbers_do_not() -> None:
    name = "kernel_" + "x" * 80 + "_tail"
    table = TableText(_COLS, ((name, "123456", "98765.43"),))
    got = _text(table, 100)
    # the name gets what the numbers leave: 100 - 1 (margin) - 6 - 8 - 2 gaps of 2 = 81
    assert got[0] == " name" + " " * 80 + "count  total ms"
    row = got[2]
    assert len(row) == 100 and row.endswith(" 123456  98765.43")
    assert row.startswith(" kernel_xxx") and "…" in row and row.split()[0].endswith("_tail")


def test_below_80_columns_a_squeezed_table_stacks() -> None:
    name = "kernel_" + "x" * 80 + "_tail"
    got = _text(TableText(_COLS, ((name, "7", "1.25"),)), 70)
    assert got == [
        " name",
        "   count  total ms",
        "   ───────────────",
        " " + middle(name, 69),
        "       7      1.25",
    ]


def test_short_names_do_not_stack_at_60_columns() -> None:
    got = _text(TableText(_COLS, (("aten::mm", "882", "51.06"),)), 60)
    assert got[-1] == " aten::mm    882     51.06"


def test_a_header_wraps_at_its_spaces_before_a_number_is_touched() -> None:
    cols = (
        Column("name", right=False, flex="shorten"),
        *(Column(f"long header {i} ms") for i in range(5)),
    )
    row = ("aten::convolution_backward", *(f"{i}.25" for i in range(5)))
    got = _text(TableText(cols, (row,)), 80)
    assert got[-1].split() == list(row)
    assert max(len(line) for line in got) <= 80


def test_a_text_cell_wraps_at_spaces_only_when_nothing_else_fits() -> None:
    cols = (Column("a", right=False), Column("b", right=False))
    table = TableText(cols, (("1.25x [1.24-1.26]", "ok (dev 0.0e+00 ≤ 1e-03)"),))
    assert _text(table, 80)[-1] == " 1.25x [1.24-1.26]  ok (dev 0.0e+00 ≤ 1e-03)"
    narrow = _text(table, 30)
    assert len(narrow) > 2  # wrapped onto more lines
    words = [w for line in narrow for w in line.split()]
    for token in ("1.25x", "[1.24-1.26]", "0.0e+00", "1e-03)"):
        assert token in words


def test_kernel_names() -> None:
    cat = (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>"
        "(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, "
        "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"
    )
    assert short_kernel(cat) == "CatArrayBatchedCopy<…>"
    assert kernel_signature(cat) == (
        "at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>"
    )
    assert short_kernel("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN") == (
        "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN"
    )
    assert (
        kernel_signature("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    )
