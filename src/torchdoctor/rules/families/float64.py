"""float64 compute (``torchdoctor check``): most of the step's counted work in float64 (numpy
arrays are float64 by default; a model cast with ``.double()`` to match them).

The share comes from the roofline's work by dtype (``record/account.py``): of the counted
FLOPs, or of the bytes moved for a step without matmuls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import account
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord


def fp64_fix(sites: list[str] | None = None) -> str:
    """float32 instead of float64, for the model and its inputs together: said in words, since
    the record knows where the model (or the default dtype) became float64, not where the
    inputs did, and a float32 model given float64 inputs stops with a dtype error."""
    sites = sites or []
    where = f"at {sites[0]}" if sites else "where the model is built"
    return (
        "# float32 instead of float64, for the model and its inputs together (a float32 model "
        "refuses float64 inputs):\n"
        f"# {where}: model.float() in place of model.double(), or "
        "torch.set_default_dtype(torch.float32) in place of float64;\n"
        "# where numpy arrays become tensors: torch.from_numpy(a).float() (numpy arrays are "
        "float64 by default)"
    )


SPEC = FindingSpec(
    id="float64-compute",
    label="float64 compute",
    title="{share:.0%} of the step's {basis} are float64",
    probe="kernel",
    threshold=th.FP64_SHARE,
    fix=fp64_fix,
    explanation="float64 halves the SIMD width and doubles the bytes of every operator on "
    "a CPU (GPUs run it 2-64x slower than float32); numpy arrays are float64 by default.",
    doc_url=f"{fx.DOCS}/generated/torch.set_default_dtype.html",
)


def measure(run: RunRecord) -> Measured | None:
    """The float64 share of the counted FLOPs (of the bytes when no FLOPs were counted);
    saving: ``FP64_SAVING`` of that share of the operators' time."""
    from torchdoctor.record.account import DtypeWork

    acc, step = account(run), run.step_ms
    if not step:
        return None
    by = acc.roofline.by_dtype
    flops = sum(v.flops for v in by.values())
    nbytes = sum(v.bytes for v in by.values())
    fp64 = by.get("fp64") or DtypeWork()
    basis, share = "FLOPs", (fp64.flops / flops if flops else 0.0)
    if not flops and nbytes:
        basis, share = "bytes moved", fp64.bytes / nbytes
    ops_ms = acc.lines.categories.get("torch ops") or 0.0
    if not ops_ms:
        ops_ms = run.op_summary.op_time_ms_per_step or step
    sites = acc.setter_sites("set_default_dtype") + acc.setter_sites("double")
    saving = th.FP64_SAVING * share * ops_ms
    return Measured(
        value=share,
        saving_ms=saving,
        title={"share": share, "basis": basis},
        evidence={
            "fp64_share": share,
            "basis": basis,
            "by_dtype": acc.roofline.by_dtype_raw,
            "sites": sites,
        },
        fix={"sites": sites},
        where=tuple(sites),
    )


RULES = (RunRule(SPEC, measure),)
