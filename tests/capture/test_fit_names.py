"""A fix is code only where its names are the script's (capture/fit_names.py): a statement
that reads a name the user's code does not bind where the fix points is printed as a comment;
the user's own lines, and statements whose names are all there, stay code."""

from __future__ import annotations

import textwrap
from pathlib import Path

from torchdoctor.capture.fit_names import fit_names, names_in_scope

SCRIPT = textwrap.dedent(
    """\
    import gc
    import torch

    LIMIT = 3


    def train(net, feats):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(LIMIT):
            gc.collect()
        return opt


    def other():
        hidden = 1
        return hidden
    """
)


def test_the_scope_is_the_functions_around_the_line_and_the_module() -> None:
    names = names_in_scope(SCRIPT, 10)
    assert {"gc", "torch", "LIMIT", "train", "net", "feats", "opt", "step"} <= names
    assert "hidden" not in names  # another function's local
    assert "hidden" in names_in_scope(SCRIPT, None)  # no place: the whole file


def test_statements_with_names_the_script_lacks_become_comments(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    fix = (
        "net = net.float()  # at train.py:10\n"
        "x = torch.from_numpy(array).float()  # numpy arrays are float64\n"
        "# and remove set_default_dtype"
    )
    assert fit_names(fix, str(script)).splitlines() == [
        "net = net.float()  # at train.py:10",
        "# x = torch.from_numpy(array).float()  # numpy arrays are float64",
        "# and remove set_default_dtype",
    ]
    # a block reads the step counter the loop has: kept; a model the script never names: not
    gc_fix = "# keep it rare; in place of the line at train.py:10:\nif step % 1000 == 0:\n    gc.collect()"
    assert fit_names(gc_fix, str(script)) == gc_fix
    other = f"model = torch.compile(model)\nopt = torch.optim.SGD(net.parameters(), lr=0.1, foreach=True)  # at {script}:8"
    assert fit_names(other, str(script)).splitlines()[0] == "# model = torch.compile(model)"
    assert fit_names(other, str(script)).splitlines()[1].startswith("opt = torch.optim.SGD(")
    # a statement commented out binds nothing for the ones after it
    twice = "model = model.half()\n# again\nmodel = model.half()"
    assert (
        fit_names(twice, str(script)) == "# model = model.half()\n# again\n# model = model.half()"
    )
    # names the fix binds itself count for its later statements
    own = "loader = iter([1])\nnext(loader)  # at train.py:10"
    assert fit_names(own, str(script)) == own


def test_shell_text_and_unreadable_scripts_are_left_alone(tmp_path: Path) -> None:
    shell = "OMP_NUM_THREADS=2 python train.py"
    assert fit_names(shell, str(tmp_path / "train.py")) == shell
    assert fit_names("x = y", None) == "x = y"
    assert fit_names("x = y", str(tmp_path / "missing.py")) == "x = y"
