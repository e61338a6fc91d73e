"""report.json read typed (commands/check/report_doc.py): malformed or missing fields read as
defaults, an account that failed reads as none."""

from __future__ import annotations

from torchdoctor.commands.check.report_doc import CheckReport, account_from_dict


def test_a_malformed_report_reads_as_defaults() -> None:
    r = CheckReport.from_dict(
        {
            "findings": [
                "x",
                {
                    "id": "host-bound",
                    "title": "t",
                    "severity": "warning",
                    "saving_ms_per_step": 1.0,
                    "share_of_step": 0.1,
                    "evidence": {},
                    "fix": None,
                    "unknown_key": 1,
                },
            ],
            "world_size": "two",
            "ranks_reported": [0, "1"],
            "measurement": "none",
        }
    )
    assert [f.id for f in r.findings] == ["host-bound"]
    assert (r.world_size, r.ranks_reported, r.measurement.measured_steps) == (1, (0,), 0)
    assert r.account is None and r.verdict is None


def test_an_account_that_failed_is_none() -> None:
    assert account_from_dict({"error": "ValueError: x"}) is None
    a = account_from_dict({"step_ms": 10, "unexplained_ms": 2.0, "explained": False})
    assert a is not None and a.unexplained_share == 0.2 and a.roofline_ms is None
