"""The options declared once (``torchdoctor.cli_options``): a default comes from the command's
options dataclass and shows in ``--help`` however the command is run; a bad-input error inside
``check`` and ``fix`` is one line."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from torchdoctor.cli_options import CONTEXT, option_from
from torchdoctor.compare.cli import compare_command
from torchdoctor.compare.rerun_types import RerunOptions
from torchdoctor.errors import UserError
from torchdoctor.exits import user_errors
from torchdoctor.fix.cli import fix_command
from torchdoctor.fix.options import FixOptions
from torchdoctor.tune.cli import tune_command
from torchdoctor.tune.options import TuneOptions


def test_option_from_reads_the_attribute_named_like_the_value() -> None:
    option = option_from(SimpleNamespace(max_rounds=7, timeout_s=2.5))

    @click.command(context_settings=CONTEXT)
    @option("--max-rounds", type=int, help="Rounds.")
    @option("--timeout", "timeout_s", type=float, help="Seconds.")
    def cmd(max_rounds: int, timeout_s: float) -> None:
        click.echo(f"{max_rounds} {timeout_s}")

    assert CliRunner().invoke(cmd, []).output == "7 2.5\n"
    assert CliRunner().invoke(cmd, ["--max-rounds", "9"]).output == "9 2.5\n"
    shown = CliRunner().invoke(cmd, ["-h"], terminal_width=200).output
    assert "Rounds.  [default: 7]" in shown and "Seconds.  [default: 2.5]" in shown


@pytest.mark.parametrize(
    ("command", "options"),
    [(fix_command, FixOptions()), (tune_command, TuneOptions()), (compare_command, RerunOptions())],
    ids=["fix", "tune", "compare"],
)
def test_command_defaults_are_the_options_dataclass_defaults(
    command: click.Command, options: object
) -> None:
    """Before, fix, tune and compare each wrote the dataclass's defaults a second time."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}  # type: ignore[arg-type]
    outputs = {"json_path", "html_path"}  # no default: not written unless asked
    shared = [
        p
        for p in command.params
        if isinstance(p, click.Option) and p.name in fields and p.name not in outputs
    ]
    assert len(shared) >= 5, [p.name for p in shared]
    for p in shared:
        if p.is_flag:
            continue
        assert p.default == fields[str(p.name)], p.name


def test_fix_builds_its_options_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fix's keyword options go to FixOptions by name: each flag lands in its own field."""
    seen: list[FixOptions] = []

    def fake_run_fix(script: object, args: object, folder: object, opts: FixOptions) -> None:
        seen.append(opts)
        raise UserError("stop here")

    monkeypatch.setattr("torchdoctor.fix.cli.run_fix", fake_run_fix)
    argv = ["--prove", "--rounds", "3", "--steps", "7", "--warmup", "2", "--min-gain", "0.1"]
    argv += ["--seed", "4", "--prove-steps", "11", "--all", "--keep-unproven", "--out", "o"]
    result = CliRunner().invoke(fix_command, [*argv, "--write", "train.py"])
    assert result.exit_code == 2, result.output
    assert seen == [
        FixOptions(
            mode="write",
            prove=True,
            min_gain=0.1,
            keep_unproven=True,
            rounds=3,
            prove_steps=11,
            warmup=2,
            seed=4,
            include_all=True,
            check_steps=7,
            out_dir="o",
        )
    ]


def test_a_command_run_on_its_own_shows_its_defaults() -> None:
    """check and tune run outside the group too (``python -m``): their own context shows the
    defaults, not only the group's."""
    from torchdoctor.commands.check.cli import check_command

    check = CliRunner().invoke(check_command, ["--help"], terminal_width=300).output
    assert "Steps to profile.  [default: 5;" in check
    assert "[default: torchdoctor-runs]" in check
    tune = CliRunner().invoke(tune_command, ["--help"], terminal_width=300).output
    assert "[default: torchdoctor-runs/tune.sqlite]" in tune
    fix = CliRunner().invoke(fix_command, ["--help"], terminal_width=300).output
    assert "Print the patch (default).\n" in fix  # not '[default: diff]' as well


def test_user_errors_is_one_line_and_the_errors_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info, user_errors():
        raise UserError("no such\nscript")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "torchdoctor: error: no such script\n"
    with pytest.raises(ValueError), user_errors():  # anything else is not ours to turn into a line
        raise ValueError("the script's own")


@pytest.mark.parametrize(
    "given",
    [["--html", "r.html"], ["--timeout", "5"], ["--profile-memory-budget", "100"]],
    ids=lambda g: g[0],
)
def test_check_takes_a_bare_json_after_any_option_with_a_value(given: list[str]) -> None:
    """Before: check's hand-kept list of value options missed --html, --timeout and
    --profile-memory-budget, so `check --html r.html --json train.py` read r.html as the
    script, left the bare --json unfilled and failed with 'Missing argument SCRIPT'."""
    from torchdoctor.commands.check.cli import check_command

    ctx = check_command.make_context("check", [*given, "--json", "train.py", "--lr", "3"])
    assert ctx.params["json_path"] == "-"
    assert (ctx.params["script"], ctx.params["script_args"]) == ("train.py", ("--lr", "3"))


def test_fix_takes_a_bare_json_after_each_of_its_value_options() -> None:
    from torchdoctor.json_arg import value_options

    for option in sorted(value_options(fix_command) - {"--json", "--from"}):
        value = "0.1" if option == "--min-gain" else "3"
        ctx = fix_command.make_context("fix", [option, value, "--json", "train.py"])
        assert (ctx.params["json_path"], ctx.params["script"]) == ("-", "train.py"), option


def test_check_option_lists_are_the_options_check_declares() -> None:
    """args.py's lists name the options in check's 'did you mean' hint: the same as declared."""
    from torchdoctor.commands.check.args import FLAG_OPTIONS, VALUE_OPTIONS
    from torchdoctor.commands.check.cli import check_command
    from torchdoctor.json_arg import value_options

    assert set(VALUE_OPTIONS) == value_options(check_command)
    declared = {
        name
        for p in check_command.params
        if isinstance(p, click.Option)
        for name in (*p.opts, *p.secondary_opts)
    }
    assert set(FLAG_OPTIONS) == declared - set(VALUE_OPTIONS) | {"-h", "--help"}
