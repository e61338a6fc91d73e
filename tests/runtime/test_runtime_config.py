"""Configuration through the runtime: clear errors for bad settings, TOML round trip, effective dict."""

from __future__ import annotations

from pathlib import Path

import pytest

import torchdoctor as td
from torchdoctor.config import RuntimeConfig
from torchdoctor.errors import UserError


def test_unknown_precision() -> None:
    with pytest.raises(UserError, match=r"precision must be one of .*'fp8'"):
        td.Runtime(precision="fp8")


def test_compile_mode_typo_suggests_the_mode() -> None:
    with pytest.raises(UserError, match="did you mean 'default'"):
        td.Runtime(compile="defualt")


def test_unknown_setting_is_named() -> None:
    with pytest.raises(UserError, match=r"unknown setting 'precison'.*did you mean 'precision'"):
        td.Runtime(precison="fp32")


def test_config_must_be_a_runtime_config() -> None:
    with pytest.raises(UserError, match="RuntimeConfig"):
        td.Runtime(config={"precision": "fp32"})  # type: ignore[arg-type]


def test_malformed_toml(tmp_path: Path) -> None:
    path = tmp_path / "torchdoctor.toml"
    path.write_text('precision = "fp32\ncompile = off\n')
    with pytest.raises(UserError, match="malformed TOML"):
        td.Runtime.from_file(path)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "torchdoctor.toml"
    path.write_text('[torchdoctor]\nprecision = "fp32"\nnum_wrokers = 2\n')
    with pytest.raises(UserError, match="num_wrokers"):
        td.Runtime.from_file(path)


def test_accumulate_needs_positive_int() -> None:
    rt = td.Runtime(device="cpu")
    with pytest.raises(UserError, match="positive integer"), rt.accumulate(0):
        pass


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    rt = td.Runtime(
        precision="auto",
        compile="default",
        max_recompiles=2,
        grad_accumulation=4,
        device="cpu",
        seed=3,
    )
    path = rt.save(tmp_path / "torchdoctor.toml")
    text = path.read_text()
    assert "resolved to fp32 on cpu" in text  # what auto chose, as a comment
    again = td.Runtime.from_file(path, device="cpu")
    assert again.config == rt.config
    assert again.config == RuntimeConfig(
        precision="auto", compile="default", max_recompiles=2, grad_accumulation=4, seed=3
    )


def test_kwargs_override_config() -> None:
    rt = td.Runtime(RuntimeConfig(precision="fp32", num_workers=3), num_workers=0, device="cpu")
    assert rt.config.precision == "fp32" and rt.config.num_workers == 0


def test_config_dict_records_choices() -> None:
    rt = td.Runtime(device="cpu")
    cfg = rt.config_dict()
    assert cfg["precision"] == "fp32" and cfg["precision_requested"] == "auto"
    assert cfg["device"] == "cpu" and cfg["world_size"] == 1 and cfg["rank"] == 0
    assert set(RuntimeConfig().to_dict()) <= set(cfg)
