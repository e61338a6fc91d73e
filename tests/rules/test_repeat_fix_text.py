"""The repeated-construction remedy is the user's own line, to move, only where that line is a
statement that can move as it is; otherwise it says what to change, in words, with the user's
names: never a template (``model``, ``...``) that fails where it is pasted, nor code to insert
after a ``return``."""

from __future__ import annotations

import ast

from torchdoctor.rules.families.repeated_work import repeat_fix


def code_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def row(kind: str, code: str | None, what: str = "Adam", site: str = "t.py:20") -> dict:
    return {"kind": kind, "site": site, "what": what, "calls": 5, "seconds": 0.01, "code": code}


def test_an_assigned_optimizer_is_the_users_line_moved() -> None:
    fix = repeat_fix([row("optimizer", "opt = torch.optim.Adam(model.parameters(), lr=1e-4)")])
    (code,) = code_lines(fix)
    assert code.startswith("opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # move this line")
    assert "before the loop" in code and "# (now at t.py:20)" in fix
    assert "param_groups" in code  # moved, a per-step learning rate would be lost
    ast.parse(code)  # the line as the user wrote it, runnable where it moves


def test_a_returned_optimizer_is_advice_naming_the_line() -> None:
    line = "return torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=0.01)"
    fix = repeat_fix([row("optimizer", line, what="AdamW", site="trainer.py:16")])
    assert code_lines(fix) == []  # nothing to paste after a return
    assert f"`{line}`" in fix and "AdamW once, before the loop" in fix and "trainer.py:16" in fix


def test_an_unread_line_gives_no_template_code() -> None:
    for kind in ("optimizer", "module", "module.to", "copy", "dataloader iterator", "hook"):
        fix = repeat_fix([row(kind, None, what="X")])
        assert code_lines(fix) == [], (kind, fix)
        assert "..." not in fix.replace("...)", "")  # no placeholder arguments


def test_copy_and_iterator_advice_use_the_users_names() -> None:
    fix = repeat_fix([row("copy", "teacher = copy.deepcopy(student).requires_grad_(False)")])
    assert "AveragedModel(student," in fix and "update_parameters(student)" in fix
    assert code_lines(fix) == []
    fix = repeat_fix([row("dataloader iterator", "xb, yb = next(iter(train_dl))")])
    assert "iter(train_dl) once" in fix and "for batch in train_dl:" in fix
    assert code_lines(fix) == []


def test_a_module_built_in_an_expression_is_not_moved_as_code() -> None:
    code = "proj = self.proj if self.fixed else nn.Linear(64, 64)"
    assert code_lines(repeat_fix([row("module", code, what="Linear")])) == [
        code + "  # move this line to __init__ (or before the loop): a module built in the "
        "step gets fresh random weights every time and is never trained"
    ]
    fix = repeat_fix([row("module", "return self.head(nn.Linear(64, 64)(x))", what="Linear")])
    assert code_lines(fix) == [] and "Linear once, in __init__" in fix
