"""Every fix in the catalogue runs against the real API of the torch (and Lightning,
transformers) installed: each registry entry's builder is called with the inputs its rule
passes, on several cases, the framework advice tables too, and the text is executed by
``tests/core/fixexec.py``. A fix that names an option the object lacks (``Adadelta(fused=
True)``), a default as a change (``bucket_cap_mb=25``) or prose instead of code fails here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.core import fixexec
from torchdoctor.record.rows import CompileCall, Optimizer
from torchdoctor.record.run import LoaderConfig
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import framework_advice as advice
from torchdoctor.rules.account_rules import TopLine
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import REGISTRY
from torchdoctor.rules.user_fixes import compiled_next_step

pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _no_process_group_left() -> Any:
    """DDP and fully_shard build in a one-process gloo group; no later test sees it."""
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _opt(
    cls: str, impl: str = "for-loop", options: list[str] | None = None, **call: Any
) -> Optimizer:
    rec: dict[str, Any] = {"class": cls, "impl": impl}
    if options is not None:
        rec["impl_options"] = options
    if call:
        rec["call"] = {"site": "/w/train.py:9", "func": cls, **call}
    return Optimizer.from_dict(rec)


LOADER = LoaderConfig.from_dict(
    {
        "num_workers": 0,
        "batch_size": 4,
        "cpus_per_rank": 2,
        "call": {
            "site": "/w/train.py:5",
            "func": "DataLoader",
            "args": ["dataset"],
            "kwargs": {"batch_size": "4", "shuffle": "True"},
        },
    }
)
BUSY = LoaderConfig.from_dict({**LOADER.raw, "num_workers": 2, "persistent_workers": True})
SIZE_EVENTS = [
    {
        "function": "forward",
        "changed_dims": [{"tensor": "L['idx']", "dim": 1, "expected": 58, "actual": 28}],
    }
]
VALUE_EVENTS = [
    {
        "function": "forward",
        "reason": "L['scale'] == 0.5",
        "changed_values": [{"name": "L['scale']", "value": "0.5", "kind": "float"}],
    }
]

# id -> list of (args, kwargs, runs only on a GPU)
Case = tuple[tuple[Any, ...], dict[str, Any], bool]


def _top_line(runs: str, site: str, ops: list[str]) -> TopLine:
    """A line of the step's account holding unexplained time, running ``runs``."""
    return TopLine(site, "step", "x = f(x)", 5.0, 5.0, 5.0, runs, ops)


CASES: dict[str, list[Case]] = {
    "host-bound": [
        ((), {}, True),
        (([_opt("Adam", options=["foreach", "fused"])],), {}, False),
        (([_opt("Adadelta", options=["foreach"])],), {}, False),
        (([_opt("Adadelta")],), {}, False),  # an older record: the class decides
        (([_opt("LBFGS", impl="default", options=[])],), {}, False),
        (([_opt("RMSprop", args=["params"], kwargs={"lr": "0.01"})],), {}, False),
    ],
    "dependency-waits": [
        ((k,), {}, k != "collective")
        for k in ("first-launch", "collective", "stream-wait", "blocking-copy", "unknown")
    ],
    "fp32-gemm-no-tensor-cores": [((True,), {}, True), ((False,), {}, True)],
    "exposed-communication": [((False,), {}, True), ((True,), {}, False)],
    "exposed-all-gather": [((False,), {}, True)],
    "recompiles": [
        ((["tensor 'x' size mismatch at index 0"], SIZE_EVENTS), {}, False),
        ((["tensor 'x' size mismatch at index 0"],), {}, False),
        ((["L['scale'] == 0.5"], VALUE_EVENTS), {}, False),
        ((["L['flag'] == True"],), {}, False),
    ],
    "graph-breaks": [
        (([{"site": "train.py:12", "reason": "Data-dependent branching"}],), {}, False)
    ],
    "dataloader-config": [
        ((LOADER, 2, False, 20.0, 10.0), {}, False),
        ((LOADER, 2, True, 20.0, 10.0), {}, True),
        ((BUSY, 2, False, 20.0, 10.0, 0.9), {}, False),
    ],
    "cpu-oversubscribed": [((1, 2, 0, 1.2), {}, False), ((1, 4, 2, 1.5), {}, False)],
    # the step's account (rules/families/unexplained.py): one fix per top line
    "unexplained-step-time": [
        (([_top_line(runs, "train.py:12", ["aten::addmm"])], "train.py:12"), {}, False)
        for runs in ("torch ops", "I/O", "sleep/wait", "gc", "Python", "other")
    ]
    + [
        (
            (
                [
                    _top_line("torch ops", "infer.py:34", ["aten::max_pool2d", "aten::conv2d"]),
                    _top_line("Python", "infer.py:40", []),
                ],
                "infer.py:34",
            ),
            {},
            False,
        ),
        (([], "train.py:12"), {}, False),
    ],
    "anomaly-detection": [((["train.py:3"],), {}, False), ((), {}, False)],
    "deterministic-algorithms": [((["train.py:3"], False), {}, False), ((None, True), {}, True)],
    "few-intra-op-threads": [((2, ["train.py:4"], {"OMP_NUM_THREADS": "1"}), {}, False)],
    "grad-without-backward": [
        ((["train.py:9"], {"train.py:9": "out = model(x)"}), {}, False),
        ((["train.py:9"],), {}, False),
    ],
    "repeated-construction": [
        (([{"kind": k, "what": w, "site": "train.py:5"}],), {}, False)
        for k, w in (
            ("optimizer", "Adam"),
            ("module", "nn.Linear"),
            ("module.to", "Net.to"),
            ("copy", "copy.deepcopy"),
            ("dataloader", "DataLoader"),
            ("dataloader iterator", "iter"),
            ("hook", "torch.Tensor.register_hook"),
            ("hook", "nn.Module.register_forward_hook"),
        )
    ]
    + [
        (([{"kind": "module", "what": "nn.Linear", "site": "t.py:5", "code": c}],), {}, False)
        for c in ("self.proj = nn.Linear(8, 8)", "head = nn.Linear(8, 2).to(device)")
    ],
    "module-call-loop": [
        (("LSTMCell", "train.py:20", True), {}, False),
        (("Encoder", "train.py:20", False), {}, False),
    ],
    "float64-compute": [((["train.py:7"],), {}, False)],
    "gc-in-step": [((["train.py:30"],), {}, False), (([],), {}, False)],
    "backend-disabled": [(("mkldnn",), {}, False), (("cudnn",), {}, True)],
    # work beside the step, by what the work is (rules/families/beside_step.py)
    "work-beside-step": [
        (("log", "train.py:40", "print(loss)", kind), {}, False)
        for kind in ("print", "copy", "update", "other")
    ],
    "housekeeping-in-step": [
        ((call,), {}, False) for call in ("torch.save", "copy.deepcopy", "gc.collect")
    ],
    "rare-long-steps": [
        (("every 5th step", 6.0, "evaluate"), {}, False),
        (("step 12", 3.0, ""), {}, False),
    ],
    "memory-growth": [
        (([("train.py:9", "loss.backward(retain_graph=True)")], []), {}, False),
        (([], [{"where": "train.py:9", "bytes": 2**22}]), {}, False),
    ],
    "torch-warning": [
        ((LOADER, "'pin_memory' argument is set as true but no accelerator is found"), {}, False)
    ],
}
EXTRA_FIXES: dict[str, list[tuple[str, bool]]] = {
    "torch-warning": [
        (
            fx.torch_warning_fix(
                LOADER,
                "This DataLoader will create 4 worker processes in total. "
                "Our suggested max number of worker in current system is 2",
            ),
            False,
        ),
        (
            fx.torch_warning_fix(
                LOADER, "'pin_memory' argument is set as true but no accelerator is found"
            ),
            False,
        ),
    ],
    "host-bound (compiled)": [
        (
            compiled_next_step(
                [CompileCall()], 0, False, [_opt("Adagrad", options=["foreach", "fused"])]
            ),
            False,
        ),
        (compiled_next_step([CompileCall()], 2, True, []), True),
    ],
    "dataloader-config (pin_memory)": [(fx.pin_memory_fix(LOADER), True)],
}


def _fixes() -> list[tuple[str, str, bool]]:
    out = []
    for fid, spec in REGISTRY.items():
        for args, kwargs, gpu in CASES.get(fid, [((), {}, _gpu_only(fid))]):
            out.append((fid, spec.fix(*args, **kwargs), gpu))
    for fid, texts in EXTRA_FIXES.items():
        out.extend((fid, text, gpu) for text, gpu in texts)
    return out


def _gpu_only(fid: str) -> bool:
    return fid in {
        "sync-stalls",
        "synchronous-copies",
        "pageable-h2d-copies",
        "fp32-on-bf16-gpu",
        "tf32-off",
        "fp16-without-grad-scaler",
        "grad-scaler-with-bf16",
        "data-parallel",
        "unpinned-non-blocking",
        "memory-fragmentation",
        "memory-pressure",
        "out-of-memory",
        "low-gpu-utilization",
        "data-loading-bound",
        "input-pipeline",
    }


@pytest.mark.parametrize(
    ("fid", "text", "gpu"), _fixes(), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else ""
)
@pytest.mark.slow
def test_every_fix_runs_against_the_real_api(fid: str, text: str, gpu: bool) -> None:
    # FSDP fixes act on a model whose blocks were passed to fully_shard
    extra = {"model": fixexec.sharded_model()} if fid == "exposed-all-gather" else None
    fixexec.run_fix(text, extra, gpu=gpu)


def test_every_registered_finding_has_a_case() -> None:
    assert set(CASES) <= set(REGISTRY)
    static = {f for f, s in REGISTRY.items() if f not in CASES}
    for fid in static:  # fixed texts: the builder takes no inputs
        REGISTRY[fid].fix()


def _finding(fid: str) -> Finding:
    return Finding(
        id=fid,
        title="t",
        severity="warning",
        saving_ms_per_step=1.0,
        share_of_step=0.1,
        evidence={"suggested_num_workers": 2},
        fix="# loop fix",
    )


ADVICE: list[tuple[str, str, Callable[[Finding], str]]] = [
    *(("lightning", fid, build) for fid, build in advice.LIGHTNING.items()),
    *(("transformers", fid, build) for fid, build in advice.TRANSFORMERS.items()),
]
GPU_ADVICE = {
    "data-parallel",
    "fp32-on-bf16-gpu",
    "fp32-gemm-no-tensor-cores",
    "tf32-off",
    "fp16-without-grad-scaler",
    "exposed-all-gather",
}


@pytest.mark.parametrize(
    ("framework", "fid", "build"), ADVICE, ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_framework_fix_runs_against_the_framework(
    framework: str, fid: str, build: Any
) -> None:
    pytest.importorskip("lightning" if framework == "lightning" else "transformers")
    gpu = fid in GPU_ADVICE
    extra = (
        fixexec.lightning_namespace(gpu)
        if framework == "lightning"
        else fixexec.transformers_namespace(gpu)
    )
    fixexec.run_fix(build(_finding(fid)), extra, gpu=gpu)


@pytest.mark.parametrize(
    "text",
    [
        "Adadelta(params, ..., fused=True)  # the fix mnist got before",
        "model = DDP(model, bucket_cap_mb=25)",
        "Keep the guarded values constant across steps",
        "torch.compile(model, mode='max-autotune-fast')",
        "DataLoader(dataset, num_workers=0, persistent_workers=True)",
    ],
)
def test_the_harness_refuses_what_would_not_work(text: str) -> None:
    with pytest.raises(fixexec.FixError):
        fixexec.run_fix(text)


def _records() -> list[dict[str, Any]]:
    """Run records that fire the rules whose fixes are built inline (not by a builder)."""
    steps = {"count": 8, "measured_steps": 5, "mean_step_ms": 10.0, "mean_data_wait_ms": 8.0}
    call = {
        "site": "/w/train.py:5",
        "func": "DataLoader",
        "args": ["dataset"],
        "kwargs": {"batch_size": "4", "num_workers": "2"},
    }
    restart = {
        "num_workers": 2,
        "batch_size": 4,
        "call": call,
        "usage": {
            "measured_batches": 5,
            "measured_wait_s": 0.04,
            "measured_first_batches": 2,
            "measured_iter_s": 0.001,
            "measured_first_wait_s": 0.035,
        },
    }
    idle = {
        "num_workers": 2,
        "batch_size": 4,
        "persistent_workers": True,
        "call": call,
        "usage": {
            "measured_batches": 5,
            "measured_wait_s": 0.04,
            "window_workers": 2,
            "window_s": 0.05,
            "window_worker_cpu_s": 0.001,
            "main_process_batch": {"batch_ms": 0.2, "item_ms": 0.05},
        },
    }
    cpu = {
        "wall_s": 1.0,
        "cores": 2,
        "intra_op_threads": 1,
        "other_busy_cores": 1.8,
        "main_thread_runqueue_wait_s": 0.7,
    }
    return [
        {"steps": steps, "config": {"dataloaders": [restart]}},
        {"steps": steps, "config": {"dataloaders": [idle]}},
        {"steps": {**steps, "mean_data_wait_ms": 0}, "cpu": cpu},
        {"steps": steps, "config": {"data_parallel": [{"device_ids": [0, 1]}]}},
        {
            "steps": steps,
            "job": {"name": "max_iters", "value": 20, "unit": "steps"},
            "compile": {
                "compiles": 1,
                "compile_s": 14.0,
                "compile_calls": [{"mode": "max-autotune"}],
            },
        },
    ]


@pytest.mark.parametrize("rec", _records())
def test_fixes_built_inside_rules_run_too(rec: dict[str, Any]) -> None:
    from torchdoctor.rules.run_rules import run_findings

    found = run_findings(rec)
    assert found
    for f in found:
        fixexec.run_fix(f.fix, gpu=f.id == "data-parallel")


def test_no_sync_under_accumulation_runs_on_a_ddp_model() -> None:
    from torch.nn.parallel import DistributedDataParallel

    fixexec.ensure_process_group()
    model = DistributedDataParallel(fixexec.Net())
    import torch

    batches = [(torch.randn(4, 8), torch.randn(4, 8))] * 3
    fixexec.run_fix(
        fx.no_sync_fix(3),
        {
            "model": model,
            "micro_batches": batches,
            "contextlib": __import__("contextlib"),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        },
    )
