"""The trial's child process: build the workload, apply the configuration, train, report.

Run as ``python -m torchdoctor.tune.worker SPEC.json``. The spec names the workload file, the
arms (the candidate's configuration first, then the ones it is compared with), the step counts
and where to write the result (``ab.child``: JSON, written atomically). Every
failure the process survives is reported with its reason; a crash by signal or a hang is seen by
the parent (``runner.py``).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from torchdoctor.ab.child import read_spec, write_result
from torchdoctor.config import RuntimeConfig
from torchdoctor.errors import UserError
from torchdoctor.tune.trial import TrialResult
from torchdoctor.tune.workload import Workload, find_function, load_module


def _has_4d(batch: Any) -> bool:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.dim() == 4
    if isinstance(batch, dict):
        return any(_has_4d(v) for v in batch.values())
    if isinstance(batch, tuple | list):
        return any(_has_4d(v) for v in batch)
    return False


def _probe(wl: Workload, device: Any) -> dict[str, Any]:
    """What the device and the workload support (see ``space.Probe``)."""
    import shutil

    import torch

    from torchdoctor.capture.cpu_usage import usable_cores
    from torchdoctor.tune.adapter import supported_impls

    first = next(
        iter(torch.utils.data.DataLoader(wl.dataset, batch_size=2, collate_fn=wl.collate_fn))
    )
    cuda = device.type == "cuda"
    return {
        "device": device.type,
        "cuda_capability": list(torch.cuda.get_device_capability(device)) if cuda else None,
        # Only real bf16 tensor cores: with emulation (the default) pre-Ampere GPUs answer True.
        "bf16": torch.cuda.is_bf16_supported(including_emulation=False) if cuda else True,
        "compiler": bool(shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")) or cuda,
        "cpu_count": usable_cores(),
        "image_batches": _has_4d(first),
        "optimizer_impls": list(supported_impls(wl.optimizer, device)),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "batch_size": wl.batch_size,
    }


class _Loop:
    """The training loop a trial times: one optimizer step per call, gradient accumulation inside.

    Like a user's loop: no ``.item()`` and no synchronisation per step; ``step()`` returns the
    loss as a device tensor, read later in one go.
    """

    def __init__(self, config: RuntimeConfig, wl: Workload) -> None:
        from torchdoctor.tune.adapter import TrialBackend, cycle, rebuild_optimizer

        self.config, self.wl = config, wl
        self.accum = config.grad_accumulation
        if wl.batch_size % self.accum:
            raise UserError(
                f"batch size {wl.batch_size} is not divisible by accumulation {self.accum}"
            )
        self.backend = TrialBackend(config)
        optimizer = rebuild_optimizer(wl.optimizer, config.optimizer_impl)
        self.model, self.optimizer = self.backend.setup(wl.model, optimizer)
        loader = self.backend.loader(
            wl.dataset, batch_size=wl.batch_size // self.accum, collate_fn=wl.collate_fn
        )
        self.batches = cycle(loader)
        self.wait_s = 0.0
        try:
            self.steps_per_epoch: int | None = max(1, len(loader) // self.accum)  # type: ignore[arg-type]
        except TypeError:  # an iterable dataset has no length
            self.steps_per_epoch = None

    def step(self) -> Any:
        """One optimizer step; returns the mean loss over its micro-batches (a device tensor)."""
        total: Any = None
        for _ in range(self.accum):
            t0 = time.perf_counter()
            batch = next(self.batches)  # on the device already: the runtime's loader moved it
            self.wait_s += time.perf_counter() - t0
            with self.backend.autocast():
                loss = self.wl.loss(self.model, batch)
            self.backend.backward(loss)  # the backend divides by the accumulation count
            value = loss.detach().float()  # the value the fidelity gate compares, left on device
            total = value if total is None else total + value
        self.backend.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return total / self.accum


def _build_arms(spec: dict[str, Any]) -> list[Any]:
    """Each arm's workload and loop, built from the same seed (identical weights and data)."""
    from torchdoctor.capture.config_probe import backend_flags
    from torchdoctor.capture.script_arm import seed_everything
    from torchdoctor.tune.rounds import TrainingArm

    fn = find_function(load_module(spec["workload"]), spec["workload"], spec.get("function"))
    arms = []
    for arm_spec in spec["arms"]:
        config = RuntimeConfig.from_dict(arm_spec["config"])
        seed_everything(int(spec["seed"]))
        wl = Workload.coerce(fn(config))
        seed_everything(int(spec["seed"]))
        arms.append(TrainingArm(arm_spec["label"], _Loop(config, wl), backend_flags()))
    return arms


def _measure(arms: list[Any], spec: dict[str, Any], out: TrialResult, device: Any) -> None:
    from torchdoctor.tune.rounds import RoundPlan, WindowClock, run_rounds, window_steps

    clock = WindowClock(device)
    cand = arms[0]
    out.steps_per_epoch = cand.loop.steps_per_epoch
    for arm in arms:
        arm.warmup(int(spec["warmup"]), clock)
    plan = RoundPlan(
        steps=window_steps(int(spec["steps"]), out.steps_per_epoch),
        min_rounds=int(spec["min_rounds"]),
        max_rounds=int(spec["max_rounds"]),
        max_s=float(spec["max_rounds_s"]),
        min_gain=float(spec["min_gain"]),
        seed=int(spec["seed"]),
    )
    stopped = run_rounds(arms, plan, clock)
    out.losses = list(cand.losses)
    out.warmup_times_s = list(cand.warmup_times_s)
    out.step_times_s = list(cand.window_steps_s)
    out.rounds_s = {arm.label: list(arm.window_steps_s) for arm in arms}
    out.window_steps = plan.steps
    bad = cand.nonfinite_step()
    if stopped == "nonfinite" and bad is not None:
        out.status, out.reason = "nonfinite", f"loss is {cand.losses[bad]} at step {bad}"
    elif stopped == "time":
        out.reason = f"stopped after {len(cand.window_steps_s)} rounds ({plan.max_s:.0f} s)"
    if cand.busy_s > 0:
        out.data_wait_share = min(1.0, cand.loop.wait_s / cand.busy_s)


def _profile(loop: _Loop, path: str, steps: int = 3) -> str:
    """Profile a few extra steps (after the measured ones) into a Chrome trace for the diagnosis."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(
        activities=acts,
        schedule=schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for _ in range(steps + 1):
            loop.step()
            prof.step()
    return path


def _peak_bytes(device: Any) -> int:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_trial(spec: dict[str, Any]) -> TrialResult:
    """Build every arm of ``spec``, run interleaved rounds, and report what happened.

    ``spec["arms"]`` lists the configurations, the candidate first; the result carries the
    candidate's losses and times and every arm's per-round mean step time.
    """
    out = TrialResult(status="ok")
    try:
        arms = _build_arms(spec)
        device = arms[0].loop.backend.device  # the runtime's (cuda:LOCAL_RANK under torchrun)
        wl = arms[0].loop.wl
        out.samples_per_step = wl.batch_size
        if spec.get("probe"):
            import torch

            with torch.random.fork_rng(devices=[]):  # the probe must not shift the loop's stream
                out.probe = {**_probe(wl, device), "backend": arms[0].loop.backend.name}
        _measure(arms, spec, out, device)
        if out.status == "ok" and spec.get("trace_path"):
            out.trace_path = _profile(arms[0].loop, spec["trace_path"])
    except Exception as exc:
        failed = classify(exc)
        failed.probe, failed.samples_per_step = out.probe, out.samples_per_step
        return failed
    out.peak_bytes = _peak_bytes(device)
    return out


def classify(exc: BaseException) -> TrialResult:
    """Map an exception raised by a trial to a status and a one-line reason."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    module = type(exc).__module__
    lowered = str(exc).lower()
    if (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or (
            isinstance(exc, RuntimeError)
            and ("out of memory" in lowered or "can't allocate memory" in lowered)
        )
    ):
        return TrialResult(status="oom", reason=text)
    if module.startswith(("torch._dynamo", "torch._inductor")):
        return TrialResult(status="compile-error", reason=text)
    return TrialResult(status="error", reason=text)


def _parent_gone(parent: int) -> bool:
    """Whether the tuner that started this trial has died (a zombie counts as dead)."""
    if os.getppid() == 1 or (os.getppid() != parent and _is_direct_child):
        return True
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a dead process not yet reaped by its own parent still answers kill(0)
        stat = Path(f"/proc/{parent}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


_is_direct_child = True


def watch_parent(spec: dict[str, Any], poll_s: float = 0.5) -> None:
    """End this trial when the tuner dies (``kill -9`` included): a daemon thread polls the
    tuner; once it is gone, the trial's folder is removed and the trial's process group
    (this process, its DataLoader workers, a torchrun agent and its ranks) is killed. A
    thread, not the parent-death signal: it also watches through torchrun, whose ranks'
    parent is the agent, and it cleans up before it kills."""
    import shutil
    import signal
    import threading

    global _is_direct_child
    parent = spec.get("parent_pid")
    if not isinstance(parent, int) or parent <= 1:
        return
    _is_direct_child = os.getppid() == parent
    folder = Path(spec["result_path"]).parent
    try:  # the tuner starts each trial in a session of its own: only then kill the group
        own_group = os.getpgrp() != os.getpgid(parent)
    except OSError:
        own_group = False

    def loop() -> None:
        while not _parent_gone(parent):
            time.sleep(poll_s)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            if own_group:
                os.killpg(os.getpgrp(), signal.SIGKILL)
        finally:
            os._exit(1)

    threading.Thread(target=loop, name="torchdoctor-tuner-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    """Entry point: read the spec, run the trial, write the result; exit 0 unless the spec is bad."""
    spec = read_spec(argv)
    watch_parent(spec)
    try:
        result = run_trial(spec)
    except Exception as exc:
        result = classify(exc)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # under torchrun, rank 0 reports (its step times include waiting for the others)
    write_result(spec, result.to_dict())  # the parent never reads a half-written result
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
