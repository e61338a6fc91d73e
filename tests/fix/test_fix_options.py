"""``fix/options.py``: the command line's defaults are FixOptions' defaults (one place to read
them), and ``--json`` records the options as before."""

from __future__ import annotations

from dataclasses import fields

import click

from torchdoctor.fix.cli import fix_command
from torchdoctor.fix.options import FixOptions

# click parameter name -> FixOptions field, where they differ
RENAMED = {"steps": "check_steps", "out_dir": "out_dir"}


def test_every_option_default_is_the_dataclass_default() -> None:
    defaults = {f.name: f.default for f in fields(FixOptions)}
    params = {p.name: p for p in fix_command.params}
    ctx = click.Context(fix_command)
    checked = 0
    for name, param in params.items():
        field = RENAMED.get(str(name), str(name))
        if field not in defaults or field in ("only", "mode"):
            continue
        default = param.get_default(ctx)
        assert default == defaults[field], (name, default, defaults[field])
        checked += 1
    assert checked >= 9  # prove, min_gain, keep_unproven, rounds, prove_steps, seed, warmup, ...
    assert params["only"].get_default(ctx) is None and FixOptions().only is None
    assert FixOptions().mode == "diff"  # --diff is the default


def test_only_and_the_json_record() -> None:
    assert FixOptions.parse_only(" host-bound, ,recompiles ") == ("host-bound", "recompiles")
    assert FixOptions.parse_only(None) is None and FixOptions.parse_only(" , ") is None
    d = FixOptions(only=("recompiles",), prove=True).to_dict()
    assert d["only"] == ["recompiles"] and d["prove"] is True
    assert set(d) == {
        "mode", "prove", "min_gain", "keep_unproven", "rounds", "prove_steps", "warmup", "seed",
        "only", "all",
    }  # fmt: skip
