"""The global-mode family (``rules/families/modes.py``): anomaly detection, deterministic
algorithms, intra-op threads and kernel backends, fired from hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import experiment, fire, lines, record, with_threshold
from torchdoctor.rules.families import RUN_FAMILY_RULES
from torchdoctor.rules.families import modes as md
from torchdoctor.rules.registry import REGISTRY

ANOMALY, DETERMINISTIC, THREADS, BACKEND = md.RULES


def test_the_mode_rules_are_registered_family_rules() -> None:
    for rule in md.RULES:
        assert rule in RUN_FAMILY_RULES and REGISTRY[rule.spec.id] is rule.spec


def test_anomaly_detection_seen_by_the_sampler_fires_with_the_estimate() -> None:
    # on for 30% of the sampled time, never set in the modes section: the spec's 20% fires it
    rec = record(lines=lines([], modes_on_share={"anomaly_detection": 0.3}))
    f = fire(ANOMALY, rec)
    assert f is not None and f.id == "anomaly-detection"
    # not measured: ANOMALY_SAVING (half) of the 100 ms step
    assert f.saving_ms_per_step == 50.0 and f.evidence["estimated"] is True
    assert f.severity == "critical" and f.title == "autograd anomaly detection is on"
    assert f.evidence["sampled_share_on"] == 0.3 and f.evidence["mean_step_ms"] == 100.0


def test_anomaly_detection_below_the_spec_share_is_quiet_unless_the_record_says_on() -> None:
    rec = record(lines=lines([], modes_on_share={"anomaly_detection": 0.1}))
    assert fire(ANOMALY, rec) is None
    # the record's own flag is a judgement: it fires whatever the sampled share
    on = record(lines=lines([], modes_on_share={"anomaly_detection": 0.1}))
    on["modes"] = {"anomaly_detection": True}
    assert fire(ANOMALY, on) is not None
    # and the spec's threshold decides for the sampled share: moved above 0.3, it goes quiet
    sampled = record(lines=lines([], modes_on_share={"anomaly_detection": 0.3}))
    assert fire(with_threshold(ANOMALY, 0.31), sampled) is None
    assert fire(with_threshold(ANOMALY, 0.29), sampled) is not None


def test_anomaly_detection_measured_without_a_gain_is_for_the_record() -> None:
    on = {
        "anomaly_detection": True,
        "setter_calls": [{"call": "set_detect_anomaly", "value": True, "site": "t.py:3"}],
    }
    f = fire(ANOMALY, record(modes=on, experiments=[experiment("anomaly-detection", 50.0, 49.0)]))
    assert f is not None
    # 2% faster without it: under TOGGLE_GAIN, so info despite the spec's warning floor
    assert f.severity == "info" and f.saving_ms_per_step == pytest.approx(2.0)
    assert f.title.endswith(
        ": measured 50.0 ms per step with it, 49.0 ms with off (per pair 0.98x [0.98-0.98], "
        "4 of 4 faster)"
    )
    assert f.where == ["t.py:3"] and "set_detect_anomaly(False)  # at t.py:3" in f.fix


def test_deterministic_algorithms_unmeasured_are_info_at_no_saving() -> None:
    f = fire(DETERMINISTIC, record(modes={"deterministic_algorithms": True}))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title.endswith(
        " (cost not measured: no extra steps ran: --full, torchrun, or the script ended first)"
    )
    assert "cudnn" not in f.fix  # a CPU run: no cuDNN flags to change
    assert fire(DETERMINISTIC, record(modes={"deterministic_algorithms": False})) is None


def test_a_toggle_that_measured_nothing_says_the_records_reason() -> None:
    """A toggle skipped (the extra steps' time limit, uneven steps) or failed says so in the
    title: "--full or torchrun" there sent a user after an option they never used."""
    on = {"deterministic_algorithms": True}
    skipped = {"id": "deterministic-algorithms", "skipped": "no time left within the 4 s limit"}
    f = fire(DETERMINISTIC, record(modes=on, experiments=[skipped]))
    assert f is not None and f.severity == "info"
    assert f.title.endswith(" (cost not measured: no time left within the 4 s limit)")
    failed = {"id": "backend-disabled", "error": "RuntimeError: no oneDNN"}
    off = {"mkldnn_enabled": False, "mkldnn_available": True}
    b = fire(BACKEND, record(modes=off, experiments=[failed]))
    assert b is not None and b.title.endswith(
        "(cost not measured: switching it failed: RuntimeError: no oneDNN)"
    )


def test_a_mode_measured_within_noise_says_why_it_is_info() -> None:
    """The title of a mode measured without a gain says which test the pairs missed, so that
    "measured 53.1 ms with it, 48.6 ms without" next to info reads as noise, not a slip."""
    on = {"deterministic_algorithms": True}
    small = experiment("deterministic-algorithms", 50.0, 49.0)
    f = fire(DETERMINISTIC, record(modes=on, experiments=[small]))
    assert f is not None and f.severity == "info"
    assert f.title.endswith(
        "4 of 4 faster); 2% of the step, under the 5% that counts as a gain: within this "
        "run's noise (info)"
    )
    # determinism_in_helper.py (tests/capture/cases) at load 20: medians 53.1 against 48.6 ms,
    # pairs net of the waits for a core 0.95, 1.07, 1.10, 0.93
    net = {
        **experiment("deterministic-algorithms", 53.1, 48.6, pairs=[0.81, 0.99, 2.06, 0.71]),
        "net_pair_ratios": [0.9497, 1.0686, 1.097, 0.9342],
    }
    f = fire(DETERMINISTIC, record(modes=on, experiments=[net]))
    assert f is not None and f.severity == "info"
    assert f.title.endswith("; the typical pair no faster: within this run's noise (info)")
    # a typical pair 7% faster (0.93) from net pairs 0.72, 0.85, 0.96, 1.27: its interval holds 1
    wide = {**net, "net_pair_ratios": [0.7186, 0.8487, 0.9553, 1.2712]}
    f = fire(DETERMINISTIC, record(modes=on, experiments=[wide]))
    assert f is not None and f.severity == "info"
    assert f.title.endswith(
        "; not every pair faster net of the waits for a core: within noise (info)"
    )
    split = experiment("backend-disabled", 50.0, 40.0, pairs=[0.5, 0.5, 1.02, 1.05])
    off = {"mkldnn_enabled": False, "mkldnn_available": True}
    b = fire(BACKEND, record(modes=off, experiments=[split]))
    assert b is not None and b.title.endswith(
        "; no more pairs faster than not: within noise (info)"
    )
    # a gain adds no such words
    every = experiment("backend-disabled", 50.0, 40.0, pairs=[0.5, 0.5, 0.98, 0.97])
    g = fire(BACKEND, record(modes=off, experiments=[every]))
    assert g is not None and g.severity != "info" and "noise" not in g.title


def test_few_threads_fire_on_a_majority_of_faster_pairs() -> None:
    modes = {"intra_op_threads": 2, "cores_per_rank": 8, "thread_env": {"OMP_NUM_THREADS": "2"}}
    # median 40% faster, but only two of four pairs faster: the gate holds it back
    split = experiment("few-intra-op-threads", 50.0, 30.0, pairs=[0.5, 0.5, 1.1, 1.2])
    assert fire(THREADS, record(modes=modes, experiments=[split])) is None
    most = experiment("few-intra-op-threads", 50.0, 30.0, pairs=[0.5, 0.5, 0.7, 1.2])
    f = fire(THREADS, record(modes=modes, experiments=[most]))
    # the typical pair, not the medians' 0.6: the median of the pairs' ten Walsh averages of
    # log ratios, (ln 0.5 + ln 0.7) / 2 and (ln 0.5 + ln 0.7 ... ) -> exp(-0.4410) = 0.6435
    assert f is not None and f.saving_ms_per_step == pytest.approx(35.65, abs=0.01)
    assert f.title.startswith("2 intra-op thread(s) on 8 cores: measured 50.0 ms")
    assert f.fix == "torch.set_num_threads(8)\n# and OMP_NUM_THREADS=8 in the environment (it is 2)"


def test_few_threads_need_the_specs_gain() -> None:
    modes = {"intra_op_threads": 2, "cores_per_rank": 8}
    small = record(modes=modes, experiments=[experiment("few-intra-op-threads", 50.0, 47.0)])
    assert fire(THREADS, small) is None  # 6% faster: under THREADS_GAIN's 10%
    assert fire(with_threshold(THREADS, 0.05), small) is not None
    assert fire(THREADS, record(modes=modes)) is None  # not tried: no claim


def test_a_backend_switched_off() -> None:
    off = {"mkldnn_enabled": False, "mkldnn_available": True}
    f = fire(BACKEND, record(modes=off))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title == (
        "torch.backends.mkldnn.enabled is False (cost not measured: no extra steps ran: --full, "
        "torchrun, or the script ended first)"
    )
    # where it was switched off is not recorded: where to look, no line to paste anywhere
    assert f.fix.startswith("# switch it back on where the script switches it off")
    assert "torch.backends.mkldnn.enabled = True" in f.fix
    # a build without oneDNN, or the backend left on: nothing to say
    assert fire(BACKEND, record(modes={"mkldnn_enabled": False, "mkldnn_available": False})) is None
    assert fire(BACKEND, record(modes={"mkldnn_enabled": True})) is None


def test_fewer_threads_on_a_busy_machine_are_said_as_info_never_a_clean_bill() -> None:
    """One thread on two cores, and two threads measured 3x slower because other processes
    held the cores: keeping one is right here and now, so no warning; the choice is still
    named (info, keep it, measure again on free cores). On free cores the same measurement
    stays quiet: a slower second thread there is no finding."""
    modes = {"intra_op_threads": 1, "cores_per_rank": 2}
    slower = experiment("few-intra-op-threads", 350.0, 1060.0, pairs=[3.5, 2.6, 2.0, 4.1])
    busy = {"wall_s": 2.0, "intra_op_threads": 1, "cores": 2, "other_busy_cores": 1.8,
            "main_thread_runqueue_wait_s": 1.6}  # fmt: skip
    f = fire(THREADS, record(modes=modes, experiments=[slower], cpu=busy))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title.startswith(
        "1 intra-op thread(s) on 2 cores: more measured no faster here, where the main thread "
        "waited for a core 80% of the measured time"
    )
    assert f.fix.startswith("# keep 1 thread(s) while other jobs hold the cores")
    free = {**busy, "other_busy_cores": 0.1, "main_thread_runqueue_wait_s": 0.0}
    assert fire(THREADS, record(modes=modes, experiments=[slower], cpu=free)) is None


BUSY = {"wall_s": 2.0, "intra_op_threads": 1, "cores": 2, "other_busy_cores": 1.8,
        "main_thread_runqueue_wait_s": 1.6}  # fmt: skip
"""Other processes on 1.8 of 2 cores, the main thread waiting for one 80% of the window."""


def test_a_mode_measured_faster_in_most_pairs_keeps_its_severity_on_a_busy_machine() -> None:
    """examples/unlisted/eval_with_grad.py's toggle at load 17: one pair hit by a stall (1.53)
    pulled the two arms' medians together (135.7 against 132.2 ms, 0.97: "no gain"), while
    three of four pairs ran 35-70% faster. The typical pair decides: the median of the ten
    Walsh averages of the log ratios, (ln 0.60 + ln 0.31 ... ) -> exp(-0.4508) = 0.6371; by
    the steps' own times (no core-wait reading) most pairs faster is enough."""
    on = {"deterministic_algorithms": True}
    noisy = experiment("deterministic-algorithms", 135.7, 132.2, pairs=[1.53, 0.31, 0.60, 0.65])
    f = fire(DETERMINISTIC, record(modes=on, experiments=[noisy], cpu=BUSY))
    assert f is not None and f.severity != "info"
    assert f.saving_ms_per_step == pytest.approx(36.29, abs=0.01)
    assert "(per pair 0.64x [0.31-1.53], 3 of 4 faster)" in f.title
    assert f.evidence["pair_interval"] == [0.31, 1.53]
    assert f.fix.startswith("torch.use_deterministic_algorithms(False)")
    # anomaly detection measured at about half the step, on the same busy machine: critical
    half = experiment("anomaly-detection", 54.9, 31.8, pairs=[0.6759, 0.1283, 0.5017, 0.6419])
    a = fire(ANOMALY, record(modes={"anomaly_detection": True}, experiments=[half], cpu=BUSY))
    assert a is not None and a.severity == "critical" and a.evidence["estimated"] is False
    assert a.saving_ms_per_step == pytest.approx(46.64, abs=0.01)  # 1 - 0.5336


def test_a_median_moved_by_one_pair_is_no_gain() -> None:
    """examples/heldout/seeded_helper.py at load 13: medians 54.8 against 49.9 ms (0.91, a
    warning before) from pairs 0.99, 1.00, 1.74, 0.72: the typical pair is 0.997 (Walsh
    averages as above). Determinism costs nothing measurable here: info."""
    on = {"deterministic_algorithms": True}
    moved = experiment(
        "deterministic-algorithms", 54.8, 49.9, pairs=[0.9875, 1.0005, 1.7371, 0.7171]
    )
    f = fire(DETERMINISTIC, record(modes=on, experiments=[moved], cpu=BUSY))
    assert f is not None and f.severity == "info"
    assert f.saving_ms_per_step == pytest.approx(0.28, abs=0.01)
    # examples/unlisted/deterministic_on.py at load 17, net of the waits for a core: a typical
    # pair 7% faster (0.93) from 0.72, 0.85, 0.96, 1.27: its interval holds 1, so info (the
    # same steps measured in-process, 30 interleaved pairs: determinism off no faster)
    wide = {**moved, "net_pair_ratios": [0.7186, 0.8487, 0.9553, 1.2712]}
    f = fire(DETERMINISTIC, record(modes=on, experiments=[wide], cpu=BUSY))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step > 5.0
    # a typical pair 28% faster (0.7193) but two of four pairs slower: no gain either
    split = experiment("backend-disabled", 50.0, 40.0, pairs=[0.5, 0.5, 1.02, 1.05])
    off = {"mkldnn_enabled": False, "mkldnn_available": True}
    b = fire(BACKEND, record(modes=off, experiments=[split]))
    assert b is not None and b.severity == "info"
    assert b.saving_ms_per_step == pytest.approx(28.07, abs=0.01)
    every = experiment("backend-disabled", 50.0, 40.0, pairs=[0.5, 0.5, 0.98, 0.97])
    assert fire(BACKEND, record(modes=off, experiments=[every])).severity != "info"  # type: ignore[union-attr]
    # net of the waits for a core, two pairs give no interval (a script that ended two pairs
    # into the toggle): no gain
    two = {**experiment("backend-disabled", 50.0, 30.0, pairs=[0.6, 0.6]),
           "net_pair_ratios": [0.6, 0.6]}  # fmt: skip
    assert fire(BACKEND, record(modes=off, experiments=[two])).severity == "info"  # type: ignore[union-attr]


def test_pairs_net_of_their_wait_for_a_core_decide_where_recorded() -> None:
    """Wall-clock pairs as eval_with_grad.py's at load 20, the main thread waiting for a core
    91% of the window (1.13, 0.93, 0.90, 1.05: no gain), with net pairs of 0.78-0.81 (about
    what its forward without grad measured in-process: 0.79, 20 of 20 interleaved pairs
    faster): the net pairs decide. The median of their Walsh averages is 0.7949."""
    on = {"deterministic_algorithms": True}
    noisy = experiment("deterministic-algorithms", 250.8, 244.3, pairs=[1.13, 0.93, 0.90, 1.05])
    assert fire(DETERMINISTIC, record(modes=on, experiments=[noisy], cpu=BUSY)).severity == "info"  # type: ignore[union-attr]
    net = {**noisy, "net_pair_ratios": [0.78, 0.80, 0.79, 0.81]}
    f = fire(DETERMINISTIC, record(modes=on, experiments=[net], cpu=BUSY))
    assert f is not None and f.severity != "info"
    assert f.saving_ms_per_step == pytest.approx(20.51, abs=0.01)
    assert "(per pair, net of the waits for a core 0.79x [0.78-0.81], 4 of 4 faster)" in f.title
    # the thread count asks about the cores themselves: its pairs stay the wall clock's
    modes = {"intra_op_threads": 1, "cores_per_rank": 2}
    slower = {**experiment("few-intra-op-threads", 350.0, 1060.0, pairs=[3.5, 2.6, 2.0, 4.1]),
              "net_pair_ratios": [0.5, 0.5, 0.5, 0.5]}  # fmt: skip
    t = fire(THREADS, record(modes=modes, experiments=[slower], cpu=BUSY))
    assert t is not None and t.severity == "info" and "net of the waits" not in t.title


# tests/capture/cases/onednn_off_by_config.py under check at load 18-20 (2 cores): oneDNN off
# there costs about 10% of the step (CPU time per step, 8 interleaved fresh-process rounds,
# median 1.10x, 8 of 8 slower with it off; benchmarks/RESULTS.md), while check's own four
# pairs said 1.08x (info) in one run and 0.74x (critical) in the next.
ONEDNN_OFF = {"mkldnn_enabled": False, "mkldnn_available": True,
              "setter_calls": [{"call": "mkldnn.enabled", "value": False, "site": "cfg.py:15"}]}  # fmt: skip
CONV_OPS = {"time_by_class_ms_per_step": {"convolution": 107.088887, "other": 2.374496}}


def test_onednn_off_that_the_pairs_cannot_resolve_is_estimated_from_the_convolutions() -> None:
    unresolved = {
        **experiment("backend-disabled", 96.5755, 109.7872, pairs=[0.6305, 1.5095, 1.2387, 1.108]),
        "net_pair_ratios": [1.0215, 0.9329, 1.2492, 1.164],
    }
    rec = record(step_ms=133.2549, modes=ONEDNN_OFF, experiments=[unresolved], ops=CONV_OPS)
    f = fire(BACKEND, rec)
    assert f is not None and f.severity == "warning"  # 10.7 of 133 ms: 8% of the step
    assert f.saving_ms_per_step == pytest.approx(10.71, abs=0.01)
    assert f.title.endswith(
        "; the pairs could not tell a gain from none: estimated at 10% of the convolutions' "
        "107.1 ms"
    )
    assert f.evidence["estimated"] is True and f.where == ["cfg.py:15"]
    assert f.fix.startswith("torch.backends.mkldnn.enabled = True  # at cfg.py:15")
    # not measured at all (--full): the same estimate, and why it is one
    g = fire(BACKEND, record(step_ms=133.2549, modes=ONEDNN_OFF, ops=CONV_OPS))
    assert g is not None and g.severity == "warning"
    assert g.saving_ms_per_step == pytest.approx(10.71, abs=0.01)
    assert g.title.endswith(
        "(estimated at 10% of the convolutions' 107.1 ms; not measured: no extra steps ran: "
        "--full, torchrun, or the script ended first)"
    )
    # the next run's pairs measured a gain (net 0.74x [0.65-0.95]): the measurement stands
    gained = {**unresolved, "net_pair_ratios": [0.65, 0.72, 0.76, 0.95]}
    h = fire(
        BACKEND, record(step_ms=133.2549, modes=ONEDNN_OFF, experiments=[gained], ops=CONV_OPS)
    )
    assert h is not None and h.severity != "info" and "estimated" not in h.title
    assert h.saving_ms_per_step > 25.0


def test_onednn_off_stays_info_where_the_pairs_rule_a_gain_out_or_nothing_convolves() -> None:
    # every net pair within 3% of 1: the interval excludes a 5% gain, the estimate is not used
    flat = {
        **experiment("backend-disabled", 100.0, 100.0, pairs=[0.9, 1.1, 1.0, 1.0]),
        "net_pair_ratios": [0.97, 1.0, 1.02, 1.03],
    }
    f = fire(BACKEND, record(modes=ONEDNN_OFF, experiments=[flat], ops=CONV_OPS))
    assert f is not None and f.severity == "info" and "noise (info)" in f.title
    # no convolution in the step (an MLP: fp32 matmuls run on BLAS, not oneDNN): no estimate
    mlp = {"time_by_class_ms_per_step": {"matmul": 80.0, "other": 5.0}}
    g = fire(BACKEND, record(modes=ONEDNN_OFF, ops=mlp))
    assert g is not None and g.severity == "info" and g.saving_ms_per_step == 0.0
