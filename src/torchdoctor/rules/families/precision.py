"""Precision (``torchdoctor check``): autocast and GradScaler that do not fit each other, and
fp32 matmuls on a GPU whose tensor cores run bf16 (and TF32, left off).

Read from the run's configuration (``record/run.py``: the autocast dtypes and scalers the
script used, torch's backend flags) and from the trace's GEMM share of the GPU's time.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy, static
from torchdoctor.rules.step_forward import step_forward

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

D = fx.DOCS

FP16_SPEC = FindingSpec(
    id="fp16-without-grad-scaler",
    label="fp16 without GradScaler",
    title="fp16 autocast without a GradScaler: small gradients underflow to zero",
    severity=SeverityPolicy(fixed="warning", risk=True),
    fix=static(fx.FP16_SCALER),
    explanation="fp16 represents nothing below ~6e-8; unscaled gradients silently become zero.",
    doc_url=f"{D}/notes/amp_examples.html",
    frameworks=(
        (
            "lightning",
            lambda f: (
                'Trainer(precision="16-mixed")  # Lightning adds the GradScaler itself\n'
                '# or, on Ampere or later: Trainer(precision="bf16-mixed") (no scaler needed)'
            ),
        ),
        (
            "transformers",
            lambda f: (
                "TrainingArguments(..., fp16=True)  # the Trainer adds the GradScaler itself\n"
                "# or, on Ampere or later: TrainingArguments(..., bf16=True)"
            ),
        ),
    ),
)
BF16_SPEC = FindingSpec(
    id="grad-scaler-with-bf16",
    label="GradScaler with bf16",
    title="GradScaler with bf16 autocast: not needed, and it syncs every step",
    fix=static(fx.BF16_SCALER),
    explanation="bf16 has fp32's exponent range, so gradients do not underflow; the scaler's "
    "inf check reads a value on the host every step.",
    doc_url=f"{D}/notes/amp_examples.html",
    frameworks=(
        ("lightning", lambda f: 'Trainer(precision="bf16-mixed")  # no scaler with bf16'),
        ("transformers", lambda f: "TrainingArguments(..., bf16=True)  # no scaler with bf16"),
    ),
)


def _amp(run: RunRecord) -> tuple[set[str], bool, dict[str, Any]]:
    """(autocast dtypes, whether an enabled GradScaler was used, the evidence)."""
    cfg = run.config
    dtypes = cfg.autocast_dtypes
    scaler = any(s.enabled for s in cfg.grad_scalers)
    scalers = [s.to_dict() for s in cfg.grad_scalers]
    return dtypes, scaler, {"autocast_dtypes": sorted(dtypes), "grad_scalers": scalers}


def _risk(evidence: dict[str, Any]) -> Measured:
    """A finding about correctness or a wasted setting: no time measured (saving 0)."""
    return Measured(value=1.0, saving_ms=0.0, share=0.0, title={}, evidence=evidence)


def measure_fp16(run: RunRecord) -> Measured | None:
    """fp16 autocast in a run that steps an optimizer, with no enabled GradScaler."""
    dtypes, scaler, evidence = _amp(run)
    if "float16" not in dtypes or scaler or not run.config.optimizer_steps:
        return None
    return _risk(evidence)


def measure_bf16(run: RunRecord) -> Measured | None:
    """An enabled GradScaler beside bf16 autocast (and no fp16)."""
    dtypes, scaler, evidence = _amp(run)
    if not scaler or "bfloat16" not in dtypes or "float16" in dtypes:
        return None
    return _risk(evidence)


# the fp32 matmul findings: kernel time, fired when GEMMs are a fifth of the GPU's time
_fp32_matmuls = partial(
    FindingSpec, probe="kernel", threshold=th.GEMM_MIN_SHARE, knobs=("precision",)
)

FP32_SPEC = _fp32_matmuls(
    id="fp32-on-bf16-gpu",
    label="fp32 on a bf16-capable GPU",
    title="fp32 training on {gpu} (bf16 tensor cores): GEMMs are {gemm:.0%} of GPU time",
    fix=fx.fp32_bf16_gpu_fix,
    explanation="bf16 matmuls run on tensor cores at several times the fp32 rate, with fp32 range.",
    doc_url=f"{D}/amp.html",
    aliases=("fp32-gemm-no-tensor-cores",),
    codemods=("bf16-autocast",),
    frameworks=(
        ("lightning", lambda f: 'Trainer(precision="bf16-mixed")'),
        ("transformers", lambda f: "TrainingArguments(..., bf16=True)"),
    ),
)
TF32_SPEC = _fp32_matmuls(
    id="tf32-off",
    label="TF32 off",
    title="TF32 is off: fp32 matmuls skip the tensor cores",
    fix=static(fx.TF32),
    explanation="TF32 keeps fp32 storage and range and runs matmuls on tensor cores.",
    doc_url=f"{D}/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    codemods=("tf32-matmul",),
    frameworks=(
        ("lightning", lambda f: 'torch.set_float32_matmul_precision("high")  # before Trainer.fit'),
        ("transformers", lambda f: "TrainingArguments(..., tf32=True)"),
    ),
)


def measure_fp32(run: RunRecord) -> Measured | None:
    """No autocast on a GPU with bf16 tensor cores: the GEMMs' share of the GPU's time
    (``value``); saving: ``GEMM_SPEEDUP_SAVING`` of that share of the step."""
    gpu, ops = run.gpu, run.op_summary
    if gpu is None or not gpu.bf16_tensor_cores or run.config.autocast_dtypes:
        return None
    gemm = (ops.gemm_share or 0.0) if ops.gemm_share_basis == "device" else 0.0
    step = run.step_ms or 0.0
    saving = gemm * step * th.GEMM_SPEEDUP_SAVING
    flags = run.config.backend_flags
    return Measured(
        value=gemm,
        saving_ms=saving,
        title={"gpu": gpu.device.get("name"), "gemm": gemm},
        evidence={"gemm_share_of_gpu_time": gemm, "device": gpu.device, "backend_flags": flags},
        fix=_forward(run.script),
    )


def _forward(script: str | None) -> dict[str, Any]:
    """The autocast fix's inputs: the step's own forward and batch device, where the script
    reads (``rules/step_forward.py``)."""
    step = step_forward(script)
    return {} if step is None else {"device": step.device, "site": step.site, "code": step.code}


def measure_tf32(run: RunRecord) -> Measured | None:
    """The fp32 GEMMs above, with TF32 matmuls off as well."""
    if run.config.backend_flags.get("tf32_matmul"):
        return None
    return measure_fp32(run)


RULES = (
    RunRule(FP16_SPEC, measure_fp16),
    RunRule(BF16_SPEC, measure_bf16),
    RunRule(FP32_SPEC, measure_fp32),
    RunRule(TF32_SPEC, measure_tf32),
)
