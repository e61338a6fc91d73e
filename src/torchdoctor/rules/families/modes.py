"""Global modes left on (``torchdoctor check``): anomaly detection, deterministic algorithms,
fewer intra-op threads than cores, a kernel backend switched off.

Where ``check`` switched the mode for a few extra steps (``capture/experiments.py``) the saving
is measured: ``1 - changed / baseline`` of the mean step, the typical ratio of interleaved
pairs of steps (``_run.toggled``). Elsewhere it is an estimate whose reason is in
``rules/thresholds.py``, and the evidence says which. A mode measured without a clear gain
(``_run.measured_gain``: under ``TOGGLE_GAIN`` of the step, or no more pairs faster than not)
stays for the record (info); one measured with a gain keeps its severity on a busy machine too,
where both steps of each pair waited for the same cores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import (
    account,
    contended,
    gain_verdict,
    measured_gain,
    toggled,
    why_not_measured,
)
from torchdoctor.rules.spec import FindingSpec, Gate, Measured, RunRule, SeverityPolicy, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

D = fx.DOCS
TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


def _at(sites: list[str]) -> str:
    return f"  # at {sites[0]}" if sites else ""


def anomaly_fix(sites: list[str] | None = None) -> str:
    """Turn anomaly detection off where the script turned it on."""
    sites = sites or []
    return (
        "torch.autograd.set_detect_anomaly(False)" + _at(sites) + "\n"
        "# (or delete `with torch.autograd.detect_anomaly():`); turn it on only while hunting a "
        "NaN, for a few steps"
    )


def deterministic_fix(sites: list[str] | None = None, cuda: bool = False) -> str:
    """Determinism off for training runs that do not need bit-exact repeats."""
    sites = sites or []
    text = "torch.use_deterministic_algorithms(False)" + _at(sites)
    if cuda:
        text += (
            "\ntorch.backends.cudnn.deterministic = False\ntorch.backends.cudnn.benchmark = True"
        )
    return text + "\n# keep it on only for the runs that must repeat bit for bit"


def threads_fix(
    cores: int, sites: list[str] | None = None, env: dict[str, str] | None = None
) -> str:
    """Use the cores this process has."""
    sites = sites or []
    lines = [f"torch.set_num_threads({cores})" + _at(sites)]
    for k, v in (env or {}).items():
        lines.append(f"# and {k}={cores} in the environment (it is {v})")
    return "\n".join(lines)


def busy_threads_fix(threads: int, cores: int) -> str:
    """Keep the threads while the cores are busy; measure again on free ones."""
    return (
        f"# keep {threads} thread(s) while other jobs hold the cores; on a machine of its own "
        f"measure again:\n# torchdoctor check measures torch.set_num_threads({cores}) against it"
    )


def backend_fix(name: str, sites: list[str] | None = None, context: bool = False) -> str:
    """Turn the backend back on where the script switched it off (right after that line, or
    inside the ``with torch.backends.<name>.flags(...)`` block it opened); where that is not
    known, say where to look instead of offering a line to paste anywhere."""
    on = f"torch.backends.{name}.enabled = True"
    if not sites:
        return (
            f"# switch it back on where the script switches it off: {on}, or delete the "
            f"`torch.backends.{name}.enabled = False` line or the "
            f"`with torch.backends.{name}.flags(enabled=False):` block (flags() switches it off "
            "unless given enabled=True); its kernels are the fast ones"
        )
    text = on + _at(sites) + " (the default: its kernels are the fast ones)"
    if context:
        text += f"\n# or drop the `with torch.backends.{name}.flags(...)` that switches it off"
    return text


ANOMALY_SPEC = FindingSpec(
    id="anomaly-detection",
    label="autograd anomaly detection",
    title="autograd anomaly detection is on{measured}",
    severity=SeverityPolicy(floor="warning"),
    threshold=th.MODE_ON_SHARE,
    fix=anomaly_fix,
    codemods=("anomaly-off",),
    explanation="Anomaly mode records a Python traceback for every operator of the forward "
    "and checks every backward result for NaN; it is a debugging tool.",
    doc_url=f"{D}/autograd.html#anomaly-detection",
)


def measure_anomaly(run: RunRecord) -> Measured | None:
    """The sampled share of the step with anomaly detection on (fires at ``MODE_ON_SHARE``, or
    whenever the record says the mode was on); saving measured by switching it off, else the
    estimate ``ANOMALY_SAVING`` of the step."""
    acc, step = account(run), run.step_ms
    if not step:
        return None
    share = acc.mode_share("anomaly_detection")
    saving, text, ev = toggled(acc, ANOMALY_SPEC.id, step)
    estimated = saving is None
    if saving is None:
        saving = th.ANOMALY_SAVING * step
    measured_little = measured_gain(acc, ANOMALY_SPEC.id, step) is False
    sites = acc.setter_sites("set_detect_anomaly", "detect_anomaly")
    return Measured(
        value=share,
        saving_ms=saving,
        title={"measured": text},
        evidence={"sampled_share_on": share, "estimated": estimated, "sites": sites, **ev},
        fix={"sites": sites},
        where=tuple(sites),
        most="info" if measured_little else None,
        judged="the mode was on" if acc.modes.anomaly_detection else None,
    )


DETERMINISTIC_SPEC = FindingSpec(
    id="deterministic-algorithms",
    label="deterministic algorithms",
    title="deterministic algorithms are on{measured}",
    threshold=th.MODE_ON_SHARE,
    fix=deterministic_fix,
    explanation="torch.use_deterministic_algorithms(True) picks slower kernels where the "
    "fast ones are not bit-reproducible, and fills every torch.empty with NaN.",
    doc_url=f"{D}/generated/torch.use_deterministic_algorithms.html",
)


def measure_deterministic(run: RunRecord) -> Measured | None:
    """The sampled share of the step with deterministic algorithms on (fires as anomaly
    detection does); saving measured by switching them off, else 0 and info."""
    acc, step = account(run), run.step_ms
    if not step:
        return None
    share = acc.mode_share("deterministic_algorithms")
    saving, text, ev = toggled(acc, DETERMINISTIC_SPEC.id, step)
    gain, verdict = gain_verdict(acc, DETERMINISTIC_SPEC.id, step)
    sites = acc.setter_sites("use_deterministic_algorithms", value=True)
    return Measured(
        value=share,
        saving_ms=saving or 0.0,
        title={"measured": text + verdict},
        evidence={"sampled_share_on": share, "sites": sites, **ev},
        fix={"sites": sites, "cuda": run.gpu is not None},
        where=tuple(sites),
        most=None if gain else "info",
        judged="the mode was on" if acc.modes.deterministic_algorithms else None,
    )


THREADS_SPEC = FindingSpec(
    id="few-intra-op-threads",
    label="too few intra-op threads",
    title="{threads} intra-op thread(s) on {cores} cores{measured}",
    threshold=th.THREADS_GAIN,
    fix=threads_fix,
    explanation="Each CPU operator splits its work over the intra-op threads; cores beyond "
    "them sit idle during every operator.",
    doc_url=f"{TUNING}#utilize-openmp",
    gates=(Gate("faster_rounds_margin", th.FASTER_ROUNDS_MARGIN),),
    variants=(
        (
            "busy",
            Variant(
                "{threads} intra-op thread(s) on {cores} cores: more measured no faster here, "
                "where {busy}{measured}",
                fix=busy_threads_fix,
            ),
        ),
    ),
)


def measure_threads(run: RunRecord) -> Measured | None:
    """Fewer intra-op threads than cores, chosen by the script or its environment: the step's
    measured gain with as many threads as cores (``value``, a share of the step), and how many
    more interleaved pairs were faster than not (gate). None where ``check`` did not try."""
    acc, step = account(run), run.step_ms
    threads, cores = acc.modes.intra_op_threads, acc.modes.cores_per_rank
    if not step or threads is None or cores is None or threads >= cores:
        return None
    e = acc.experiment(THREADS_SPEC.id)
    if e is None:
        return None
    saving, text, ev = toggled(acc, THREADS_SPEC.id, step, net=False)  # the cores are the question
    if saving is None:
        return None
    faster = sum(r < 1 for r in e.pair_ratios)
    sites = acc.setter_sites("set_num_threads")
    env = acc.modes.thread_env
    margin = float(2 * faster - len(e.pair_ratios))
    busy = contended(run)
    if busy and (saving / step < th.THREADS_GAIN or margin < th.FASTER_ROUNDS_MARGIN):
        # other processes held the cores: fewer threads are right for now, not for a machine of
        # its own; said (info) so that the choice is never a silent clean bill
        return Measured(
            value=saving / step,
            saving_ms=0.0,
            title={"threads": threads, "cores": cores, "busy": busy, "measured": text},
            evidence={"intra_op_threads": threads, "cores_per_rank": cores, "busy": busy, **ev},
            fix={"threads": threads, "cores": cores},
            where=tuple(sites),
            variant="busy",
            judged="fewer threads than cores, measured on a busy machine",
            most="info",
        )
    return Measured(
        value=saving / step,
        saving_ms=saving,
        title={"threads": threads, "cores": cores, "measured": text},
        evidence={"intra_op_threads": threads, "cores_per_rank": cores, "thread_env": env, **ev},
        fix={"cores": cores, "sites": sites, "env": env},
        where=tuple(sites),
        gates={"faster_rounds_margin": margin},
    )


BACKEND_SPEC = FindingSpec(
    id="backend-disabled",
    label="a kernel backend switched off",
    title="torch.backends.{name}.enabled is False{measured}",
    fix=backend_fix,
    explanation="With oneDNN (mkldnn) or cuDNN off, convolutions and some matmuls fall back "
    "to generic kernels that are several times slower.",
    doc_url=f"{D}/backends.html",
)


def measure_backend(run: RunRecord) -> Measured | None:
    """oneDNN off on a CPU run (where it is built), cuDNN off on a CUDA run; saving measured
    by switching it back on, else 0 and info."""
    acc, step = account(run), run.step_ms
    if not step:
        return None
    name = "cudnn" if run.gpu is not None else "mkldnn"
    if acc.modes.enabled(name) is not False:
        return None
    if name == "mkldnn" and acc.modes.mkldnn_available is False:
        return None
    saving, text, ev = toggled(acc, BACKEND_SPEC.id, step)
    gain, verdict = gain_verdict(acc, BACKEND_SPEC.id, step)
    sites = acc.setter_sites(f"{name}.enabled", f"{name}.flags", value=False)
    context = bool(acc.setter_sites(f"{name}.flags", value=False))
    conv_ms = _conv_ms(run) if name == "mkldnn" else 0.0
    estimate = th.ONEDNN_OFF_SAVING * conv_ms
    if not gain and estimate > 0 and not _rules_out_a_gain(ev):
        # Not measured, or four pairs on a busy machine that cannot tell a 10% cost from none
        # (the same script measured 0.74x and 1.08x in two runs): the convolutions' time says
        # what oneDNN's kernels were missing, an estimate of the cost, never "nothing".
        est = f"estimated at {th.ONEDNN_OFF_SAVING:.0%} of the convolutions' {conv_ms:.1f} ms"
        if gain is False:
            verdict = f"; the pairs could not tell a gain from none: {est}"
        else:
            verdict = f" ({est}; not measured: {why_not_measured(acc, BACKEND_SPEC.id)})"
        saving, gain = estimate, True
        ev = {**ev, "estimated": True, "convolution_ms_per_step": round(conv_ms, 3)}
    return Measured(
        value=1.0,
        saving_ms=saving or 0.0,
        title={"name": name, "measured": text + verdict},
        evidence={"backend": name, "sites": sites, **ev},
        fix={"name": name, "sites": sites, "context": context},
        where=tuple(sites),
        most=None if gain else "info",
    )


def _conv_ms(run: RunRecord) -> float:
    """Convolution time per step (ms) of the profiled window's operators, 0 when none."""
    by_class = run.ops.get("time_by_class_ms_per_step") or {}
    value = by_class.get("convolution") if isinstance(by_class, dict) else None
    return float(value) if isinstance(value, int | float) else 0.0


def _rules_out_a_gain(ev: dict[str, object]) -> bool:
    """The measured pairs' interval lies above ``1 - TOGGLE_GAIN``: no gain that counts."""
    iv = ev.get("pair_interval")
    return isinstance(iv, list) and iv[0] > 1.0 - th.TOGGLE_GAIN


RULES = (
    RunRule(ANOMALY_SPEC, measure_anomaly),
    RunRule(DETERMINISTIC_SPEC, measure_deterministic),
    RunRule(THREADS_SPEC, measure_threads),
    RunRule(BACKEND_SPEC, measure_backend),
)
