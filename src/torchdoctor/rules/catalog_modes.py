"""Registry entries of the step's account (``torchdoctor check``): unexplained time, global
modes left on, repeated construction, work done in the wrong precision or for nothing."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import mode_fixes as mf
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy

D = fx.DOCS
TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"

MODE_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="unexplained-step-time",
        label="unexplained step time",
        title="{share:.0%} of the step ({ms:.1f} ms) is not explained: it runs at {eff} of this "
        "machine's roofline; most time at {site} ({what})",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.UNEXPLAINED_SHARE,
        fix=mf.unexplained_fix,
        explanation="No named cause accounts for this time, and the step is far from what the "
        "hardware can do for its work (its FLOPs and bytes at the measured rates). The line "
        "table says where the time goes and what runs there.",
        doc_url=TUNING,
    ),
    FindingSpec(
        id="anomaly-detection",
        label="autograd anomaly detection",
        title="autograd anomaly detection is on{measured}",
        sources=("run",),
        severity=SeverityPolicy(floor="warning"),
        threshold=th.MODE_ON_SHARE,
        fix=mf.anomaly_fix,
        codemods=("anomaly-off",),
        explanation="Anomaly mode records a Python traceback for every operator of the forward "
        "and checks every backward result for NaN; it is a debugging tool.",
        doc_url=f"{D}/autograd.html#anomaly-detection",
    ),
    FindingSpec(
        id="deterministic-algorithms",
        label="deterministic algorithms",
        title="deterministic algorithms are on{measured}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.TOGGLE_GAIN,
        fix=mf.deterministic_fix,
        explanation="torch.use_deterministic_algorithms(True) picks slower kernels where the "
        "fast ones are not bit-reproducible, and fills every torch.empty with NaN.",
        doc_url=f"{D}/generated/torch.use_deterministic_algorithms.html",
    ),
    FindingSpec(
        id="few-intra-op-threads",
        label="too few intra-op threads",
        title="{threads} intra-op thread(s) on {cores} cores{measured}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.THREADS_GAIN,
        fix=mf.threads_fix,
        explanation="Each CPU operator splits its work over the intra-op threads; cores beyond "
        "them sit idle during every operator.",
        doc_url=f"{TUNING}#utilize-openmp",
    ),
    FindingSpec(
        id="grad-without-backward",
        label="autograd graphs recorded for nothing",
        title="{n} forward(s) per step record an autograd graph no backward uses ({sites}){measured}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.NO_GRAD_SAVING,
        fix=mf.no_grad_fix,
        codemods=("inference-mode",),
        explanation="With grad mode on, every forward operator saves what its backward would "
        "need and builds a graph node; when no backward ever runs through the output (an "
        "evaluation, inference or metrics forward) that work and memory are wasted.",
        doc_url=f"{D}/generated/torch.autograd.grad_mode.inference_mode.html",
    ),
    FindingSpec(
        id="repeated-construction",
        label="construction repeated inside the step",
        title="{what} built {per_step:.1f}x per step inside the loop at {site}",
        sources=("run",),
        severity=SeverityPolicy(floor="warning"),
        threshold=th.REPEAT_PER_STEP,
        fix=mf.repeat_fix,
        explanation="Work that builds the same object every step (an optimizer, a module, a "
        "model copy, a DataLoader, a hook) belongs before the loop; rebuilt, it costs its "
        "construction every step and often loses state (optimizer moments, trained weights).",
        doc_url=f"{D}/optim.html#how-to-use-an-optimizer",
    ),
    FindingSpec(
        id="module-call-loop",
        label="a module stepped in a Python loop",
        title="{module} called {calls} times per step at {site}, each on a slice of a larger tensor: "
        "a Python loop over {over}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.LOOP_SAVING,
        fix=mf.loop_fix,
        explanation="Each call runs the module's small operators (and, when training, their "
        "backward, which also adds every slice's gradient into a full-size zero tensor) one "
        "slice at a time. One call over the whole sequence (nn.LSTM / nn.GRU / nn.RNN, one "
        "fused kernel) or the whole batch does the same work in a few large operators.",
        doc_url=f"{D}/generated/torch.nn.LSTM.html",
    ),
    FindingSpec(
        id="float64-compute",
        label="float64 compute",
        title="{share:.0%} of the step's {basis} are float64",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.FP64_SHARE,
        fix=mf.fp64_fix,
        explanation="float64 halves the SIMD width and doubles the bytes of every operator on "
        "a CPU (GPUs run it 2-64x slower than float32); numpy arrays are float64 by default.",
        doc_url=f"{D}/generated/torch.set_default_dtype.html",
    ),
    FindingSpec(
        id="gc-in-step",
        label="garbage collection in the step",
        title="garbage collection takes {ms:.1f} ms per step ({share:.0%}){how}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.GC_SHARE,
        fix=mf.gc_fix,
        explanation="A full collection walks every Python object alive (datasets held as lists "
        "of Python objects make it slow); gc.collect() in the loop pays it every step.",
        doc_url="https://docs.python.org/3/library/gc.html#gc.freeze",
    ),
    FindingSpec(
        id="backend-disabled",
        label="a kernel backend switched off",
        title="torch.backends.{name}.enabled is False{measured}",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.TOGGLE_GAIN,
        fix=mf.backend_fix,
        explanation="With oneDNN (mkldnn) or cuDNN off, convolutions and some matmuls fall back "
        "to generic kernels that are several times slower.",
        doc_url=f"{D}/backends.html",
    ),
)
