"""Fix builders of the mode, repeated-work and unexplained-time findings: each takes what the
run measured (the user's lines, the setting they chose) and returns code to paste."""

from __future__ import annotations

from typing import Any


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


def no_grad_fix(sites: list[str], code: dict[str, str] | None = None) -> str:
    """Run the forwards whose outputs never reach a backward without autograd."""
    code = code or {}
    out = []
    for site in sites[:3]:
        line = code.get(site) or "outputs = model(inputs)"
        out.append(f"with torch.inference_mode():  # at {site}\n    {line}")
    out.append(
        "# torch.no_grad() instead when the outputs feed autograd later; model.eval() for "
        "dropout and batch norm"
    )
    return "\n".join(out)


_REPEAT_FIX = {
    "optimizer": "optimizer = torch.optim.{what}(model.parameters(), ...)  # once, before the "
    "loop: rebuilt every step it also throws away its state (momentum, Adam's moments)",
    "module": "# build the {what} once, in __init__ (or before the loop): a module built in the "
    "step gets fresh random weights every time and is never trained",
    "module.to": "model.to(device)  # once, before the loop; inside it move only the batch",
    "copy": "ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn="
    "torch.optim.swa_utils.get_ema_multi_avg_fn(0.999))  # once; then ema.update_parameters("
    "model) each step, instead of copying the model",
    "dataloader": "# build the DataLoader once, outside the loop "
    "(persistent_workers=True keeps its workers between epochs)",
    "dataloader iterator": "it = iter(loader)  # once (or loop `for batch in loader:`); "
    "iter() starts the worker processes again every time: next(iter(loader)) in the loop pays "
    "their start-up every step (persistent_workers=True keeps them between epochs)",
    "hook": "# call {what} once, outside the loop, and keep its handle (handle.remove() when "
    "done): hooks registered every step pile up and every backward runs all of them",
}
_MOVE_LINE = {
    "module": "  # move this line to __init__ (or before the loop): a module built in the step "
    "gets fresh random weights every time and is never trained",
    "dataloader": "  # move this line before the loop (persistent_workers=True keeps its workers "
    "between epochs)",
}
"""Where the user's own line is known, the fix is that line, moved."""


def repeat_fix(rows: list[dict[str, Any]]) -> str:
    """One line per kind of construction, at its site: the user's own line where it is known
    (``code``) for what only their arguments can build, else the pattern."""
    out = []
    for r in rows[:4]:
        kind = str(r["kind"])
        what = str(r.get("what") or "")
        if kind == "hook":
            what = what.split(".")[-1]
        code = str(r.get("code") or "").strip()
        if kind in _MOVE_LINE and code and not code.startswith("#"):
            out.append(code + _MOVE_LINE[kind] + f"\n# (now at {r['site']})")
            continue
        template = _REPEAT_FIX.get(kind, "# move {what} out of the loop")
        out.append(template.format(what=what or "...") + f"\n# (now at {r['site']})")
    return "\n".join(out)


_SEQUENCE_MODULE = {"LSTMCell": "LSTM", "GRUCell": "GRU", "RNNCell": "RNN"}


def loop_fix(module: str, site: str, cell: bool) -> str:
    """One call over the whole tensor instead of a Python loop over its slices at ``site``."""
    if cell:
        seq = _SEQUENCE_MODULE.get(module, "LSTM")
        return (
            f"self.rnn = nn.{seq}(input_size, hidden_size, batch_first=True)  # in __init__, "
            f"instead of the nn.{module}\n"
            f"out, state = self.rnn(x)  # the whole sequence in one call, instead of the loop at "
            f"{site}\n"
            "# (a loop is needed only when each step's input depends on the previous output)"
        )
    return (
        f"out = model(x)  # the {module}, called once on the whole batch instead of once per "
        f"slice at {site}\n"
        "# (per-sample code that cannot batch: torch.func.vmap(fn)(x))"
    )


def fp64_fix(sites: list[str] | None = None) -> str:
    """float32 instead of float64."""
    sites = sites or []
    return (
        "model = model.float()" + _at(sites) + "\n"
        "x = torch.from_numpy(array).float()  # numpy arrays are float64 by default\n"
        "# and remove torch.set_default_dtype(torch.float64), if set"
    )


def gc_fix(explicit: list[str]) -> str:
    """Collect less often (or not by hand in the loop)."""
    if explicit:
        return (
            f"# delete gc.collect() from the loop (at {explicit[0]}); if memory grows, find what "
            "keeps it (a list of losses as tensors, a graph kept by `total += loss`)"
        )
    return (
        "import gc\n"
        "gc.freeze()  # after building the model and the data: the collector skips them from "
        "then on\n"
        "gc.set_threshold(50_000, 50, 100)  # or collect the young generation less often"
    )


def backend_fix(name: str) -> str:
    """Turn the backend back on."""
    return f"torch.backends.{name}.enabled = True  # the default: its kernels are the fast ones"


SPATIAL_OPS = (
    "aten::max_pool",
    "aten::avg_pool",
    "aten::adaptive_",
    "aten::conv",
    "aten::mkldnn_conv",
    "aten::_convolution",
    "aten::convolution",
    "aten::batch_norm",
    "aten::native_batch_norm",
)
"""Operators on 4-D images whose CPU and GPU kernels depend on the memory format: NCHW
max pooling ran about 10x slower than channels_last on one CPU (AMD EPYC, torch 2.13, one
thread, a 64x32x32x32 batch: median 10.6x over 6 interleaved rounds, 2.4-12.1x)."""


def unexplained_fix(category: str, site: str, ops: list[str]) -> str:
    """What to look at first, from what runs under the top line."""
    if category == "torch ops":
        op = ops[0] if ops else "its operators"
        if any(o.startswith(SPATIAL_OPS) for o in ops[:2]):
            return (
                f"# {site}: most of the time is in {op}, far below this machine's rates. "
                "Pooling and\n# convolution kernels are often several times faster in "
                "channels_last (NHWC):\n"
                "model = model.to(memory_format=torch.channels_last)\n"
                "images = images.contiguous(memory_format=torch.channels_last)  # each 4-D batch\n"
                "# or torch.compile(model) to fuse them"
            )
        return (
            f"# {site}: most of the time is in {op}, far below this machine's rates: fewer, "
            "larger operators (batch the work, vectorise loops over tensors), or "
            "torch.compile(model) to fuse them"
        )
    if category == "I/O":
        return f"# {site}: file or socket I/O in the step: do it every N steps, or in a background thread"
    if category == "sleep/wait":
        return (
            f"# {site}: the step sleeps or waits (a lock, a queue, another thread or process): "
            "remove the wait or overlap it with compute"
        )
    if category == "gc":
        return f"# {site}: garbage collection: gc.freeze() after set-up, or fewer Python objects per step"
    return (
        f"# {site}: plain Python in the step (no torch operators under it): vectorise it "
        "with tensor operations, move it out of the loop, or run it every N steps"
    )
