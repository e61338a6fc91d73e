"""Run a fix's text against the real API: every Python line is executed with real objects
(a model, a dataset, an optimizer, torch itself, Lightning's and transformers' classes), every
shell line is checked for known commands and variables, and nothing else (prose) is allowed.

Placeholders a fix uses for "your other arguments" (``...`` as an argument, ``batch_size=...``)
are dropped before running. GPU-only calls (``torch.cuda.*``, ``device_ids=``, ``pin_memory()``
on a CPU-only build) are bound to the real signature instead of run. A keyword whose value is
the callee's own default is refused: a fix never presents a default as a change.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import queue
import re
import tempfile
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

_SHELL = re.compile(
    r"^(?:export\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s*)*(?:python|torchrun|torchdoctor|pip)?(\s|$)"
)
_ENV_VARS = {
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCHINDUCTOR_CACHE_DIR",
    "OMP_NUM_THREADS",
    "CUDA_MODULE_LOADING",
    "TORCH_LOGS",
}
_TORCHDOCTOR_COMMANDS = {"analyze", "check", "tune", "compare", "memory", "fix"}
# Defaults a signature spells as None: what None means.
EFFECTIVE_DEFAULTS = {("DistributedDataParallel", "bucket_cap_mb"): 25}


class FixError(AssertionError):
    """The fix does not run against the real API (the message says which line and why)."""


def _is_shell(line: str) -> bool:
    head = line.split("#", 1)[0].strip()
    if not head:
        return False
    if head.startswith(("torchrun ", "torchdoctor ", "export ", "python ", "pip ")):
        return True
    return bool(re.match(r"^[A-Z_][A-Z0-9_]*=\S+\s+\S", head))


def check_shell(line: str) -> None:
    """A shell line: only known variables, and torchdoctor commands that exist."""
    head = line.split("#", 1)[0].strip()
    for name in re.findall(r"(?:^|\s)(?:export\s+)?([A-Z_][A-Z0-9_]*)=", head):
        if name not in _ENV_VARS:
            raise FixError(f"unknown environment variable {name} in {line!r}")
    words = head.split()
    if "torchdoctor" in words:
        sub = words[words.index("torchdoctor") + 1]
        if sub not in _TORCHDOCTOR_COMMANDS:
            raise FixError(f"no such command: torchdoctor {sub}")


def split_fix(text: str) -> tuple[list[str], str]:
    """(shell lines, Python source) of a fix; comments stay in the Python source."""
    shell, code = [], []
    for line in text.splitlines():
        (shell if _is_shell(line) else code).append(line)
    return shell, "\n".join(code)


class _DropPlaceholders(ast.NodeTransformer):
    def __init__(self, provided: set[str]) -> None:
        self.provided = provided

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        """The import must work; names the namespace wraps (to check defaults) stay wrapped."""
        import importlib

        module = importlib.import_module(node.module or "")
        for alias in node.names:
            if not hasattr(module, alias.name):
                raise FixError(f"from {node.module} import {alias.name}: no such name")
        if all((a.asname or a.name) in self.provided for a in node.names):
            return None
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        # the spelled-out class goes through the same checks as the short name
        if ast.unparse(node) == "torch.nn.parallel.DistributedDataParallel":
            return ast.copy_location(ast.Name("DDP", ast.Load()), node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        node.args = [a for a in node.args if not _is_ellipsis(a)]
        node.keywords = [k for k in node.keywords if not _is_ellipsis(k.value)]
        return node


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


# The settings fixes suggest; a user's own arguments kept in a rebuilt call (lr=0.01) are the
# user's, whatever their value.
SUGGESTED = {
    "bucket_cap_mb",
    "gradient_as_bucket_view",
    "static_graph",
    "find_unused_parameters",
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "fused",
    "foreach",
    "mode",
    "fullgraph",
    "dynamic",
    "precision",
    "log_every_n_steps",
    "accumulate_grad_batches",
    "bf16",
    "fp16",
    "tf32",
    "torch_compile",
    "ddp_bucket_cap_mb",
    "gradient_accumulation_steps",
    "use_reentrant",
    "reshard_after_forward",
    "forward_prefetch",
    "backward_prefetch",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "logging_steps",
    "group_by_length",
    "strategy",
    "devices",
}


def _defaults_check(name: str, real: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    kwargs = {k: v for k, v in kwargs.items() if k in SUGGESTED}
    try:
        params = inspect.signature(real).parameters
    except (TypeError, ValueError):
        return
    for key, value in kwargs.items():
        p = params.get(key)
        default = EFFECTIVE_DEFAULTS.get((name, key), p.default if p is not None else None)
        if p is None or default is inspect.Parameter.empty:
            continue
        literal = isinstance(value, bool | int | float | str)
        if literal and type(value) is type(default) and value == default:
            raise FixError(f"{name}({key}={value!r}) is the default, not a change")


def checked(name: str, real: Callable[..., Any], run: bool = True) -> Callable[..., Any]:
    """``real`` that refuses defaults as changes; with ``run=False`` only binds the arguments
    to its signature (GPU-only calls) and returns a permissive stand-in."""

    @functools.wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        _defaults_check(name, real, kwargs)
        if run:
            return real(*args, **kwargs)
        target = real.__init__ if inspect.isclass(real) else real
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            return Anything()
        bound_args = (None, *args) if inspect.isclass(real) else args
        try:
            sig.bind(*bound_args, **kwargs)
        except TypeError as exc:
            raise FixError(f"{name}: {exc}") from None
        return Anything()

    return call


class Anything:
    """What a signature-only call returns: any attribute, call or context works."""

    def __getattr__(self, name: str) -> Anything:
        return Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Anything:
        return Anything()

    def __enter__(self) -> Anything:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Cuda(types.SimpleNamespace):
    """torch.cuda on a machine without a GPU: every function bound to its real signature."""

    def __getattr__(self, name: str) -> Any:
        real = getattr(torch.cuda, name)
        if callable(real):
            return checked(f"torch.cuda.{name}", real, run=False)
        return real


class _Torch(types.SimpleNamespace):
    def __getattr__(self, name: str) -> Any:
        if name == "cuda" and not torch.cuda.is_available():
            return _Cuda()
        if name == "compile":
            return _compile
        return getattr(torch, name)


def _compile(model: Any = None, **kwargs: Any) -> Any:
    mode = kwargs.get("mode")
    if mode is not None and mode not in torch._inductor.list_mode_options():
        raise FixError(f"torch.compile: no mode {mode!r}")
    _defaults_check("compile", torch.compile, kwargs)
    return torch.compile(model, **kwargs)  # lazy: nothing compiles until it is called


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.layers:
            x = b(x)
        return x


def _optimizer(cls: type) -> Callable[..., Any]:
    """The optimizer class, built and stepped once (fused/foreach checks happen at the step)."""

    def build(params: Any, *args: Any, **kwargs: Any) -> Any:
        _defaults_check(cls.__name__, cls, kwargs)
        params = list(params)
        for p in params:
            p.grad = torch.ones_like(p)
        opt = cls(params, *args, **kwargs)
        if cls is torch.optim.LBFGS:
            opt.step(lambda: sum(p.sum() for p in params))
        else:
            opt.step()
        return opt

    return build


def _dataloader(*args: Any, **kwargs: Any) -> Any:
    from torch.utils.data import DataLoader

    _defaults_check("DataLoader", DataLoader, kwargs)
    return DataLoader(*args, **kwargs)


def _ddp(gpu: bool) -> Callable[..., Any]:
    from torch.nn.parallel import DistributedDataParallel

    real = checked("DistributedDataParallel", DistributedDataParallel, run=not gpu)

    def build(module: Any, *args: Any, **kwargs: Any) -> Any:
        if "device_ids" in kwargs and not torch.cuda.is_available():
            return checked("DistributedDataParallel", DistributedDataParallel, False)(
                module, *args, **kwargs
            )
        return real(module, *args, **kwargs)

    return build


def ensure_process_group() -> None:
    """A one-process gloo group, so that DDP and fully_shard build for real."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def sharded_model() -> Net:
    """A Net whose blocks and root are sharded with FSDP2's fully_shard (one process, CPU)."""
    from torch.distributed.fsdp import fully_shard

    ensure_process_group()
    model = Net()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    return model


def _fully_shard() -> Callable[..., Any]:
    from torch.distributed.fsdp import fully_shard

    return checked("fully_shard", fully_shard)


def namespace(gpu: bool = False) -> dict[str, Any]:
    """Real objects under the names fixes use."""
    ensure_process_group()
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    model = Net()
    dataset = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 8))
    x = torch.randn(4, 8)
    if gpu and not torch.cuda.is_available():
        x = _GpuTensor._make_subclass(_GpuTensor, x)
    loss = model(x).sum()
    ns: dict[str, Any] = {
        "torch": _Torch(),
        "nn": nn,
        "os": os,
        "functools": functools,
        "queue": queue,
        "model": model,
        "params": list(model.parameters()),
        "dataset": dataset,
        "train_set": dataset,
        "bs": 4,
        "x": x.requires_grad_(),
        "idx": torch.zeros(4, 6, dtype=torch.long),
        "batch": {"input_ids": torch.zeros(4, 6, dtype=torch.long)},
        "y": torch.randn(4, 8),
        "device": "cpu",
        "local_rank": 0,
        "loss": loss,
        "criterion": nn.functional.mse_loss,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "running": torch.zeros(()),
        "step": 100,
        "scale": 0.5,
        "path": os.path.join(tempfile.gettempdir(), "fixexec-checkpoint.pt"),
        "block": model.layers[0],
        "policy": lambda ctx, op, *a, **k: _policy(op),
        "create_selective_checkpoint_contexts": create_selective_checkpoint_contexts,
        "is_last_microbatch": True,
        "fully_shard": _fully_shard(),
        "DataLoader": _dataloader,
        # the names the inference fixes use: a decode step, its static input and the logits
        "decode_step": lambda ids: model(ids),
        "static_input": torch.zeros(4, 8),
        "next_input": torch.randn(4, 8),
        "logits": torch.randn(4, 6, 10),
        "tokens": [],
        "host_copy": torch.zeros(4, dtype=torch.long),
        "ready": _Event(),
        # and those of the step's account (rules/mode_fixes.py)
        "inputs": x,
        "images": torch.randn(2, 3, 8, 8),
        "out": model(x),
        "array": np.zeros((4, 8)),
        "input_size": 8,
        "hidden_size": 8,
        "self": _Holder(),
        "loader": _dataloader(dataset, batch_size=4),
        "ema": None,
        # and those of work beside the step (rules/families/beside_step.py, housekeeping.py)
        "snapshot": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "ema_params": [p.detach().clone() for p in model.parameters()],
        "model_params": [p.detach() for p in model.parameters()],
        "decay": 0.999,
        "DDP": _ddp(gpu),
        "DistributedDataParallel": _ddp(gpu),
    }
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
            ns[name] = _optimizer(cls)
    return ns


class _Holder(nn.Module):
    """``self`` in a fix that belongs in a module's ``__init__``; ``self.rnn(x)`` runs an LSTM
    over a batch-first sequence of ``x``'s width."""

    def __init__(self) -> None:
        super().__init__()
        self.x = torch.randn(4, 6, 8)


class _Event:
    """``torch.cuda.Event``'s two methods the fixes call, with its signatures (no CUDA here)."""

    def record(self, stream: Any = None) -> None:
        inspect.signature(torch.cuda.Event.record).bind(self, stream)

    def synchronize(self) -> None:
        inspect.signature(torch.cuda.Event.synchronize).bind(self)


class _GpuTensor(torch.Tensor):
    """A tensor whose device-only methods are bound to their signatures on a CPU-only build."""

    def pin_memory(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        checked("Tensor.pin_memory", torch.Tensor.pin_memory, run=False)(self, *args, **kwargs)
        return self


def _policy(op: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return (
        CheckpointPolicy.MUST_SAVE
        if op is torch.ops.aten.mm.default
        else CheckpointPolicy.PREFER_RECOMPUTE
    )


def run_fix(text: str, extra: dict[str, Any] | None = None, gpu: bool = False) -> None:
    """Execute ``text`` (shell lines checked, Python run); raises FixError on what fails."""
    shell, code = split_fix(text)
    for line in shell:
        check_shell(line)
    # A fix that shows a method's body ("return DataLoader(...)") runs at module level.
    source = re.sub(r"(?m)^return ", "__returned__ = ", code)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise FixError(f"not code (prose or broken syntax): {exc.text!r}") from None
    ns = {**namespace(gpu), **(extra or {})}
    tree = ast.fix_missing_locations(_DropPlaceholders(set(ns)).visit(tree))
    with tempfile.TemporaryDirectory() as tmp:
        ns.setdefault("TMP", tmp)
        try:
            exec(compile(tree, "<fix>", "exec"), ns)
        except FixError:
            raise
        except Exception as exc:
            raise FixError(f"{type(exc).__name__}: {exc}\n--- fix ---\n{text}") from exc


def lightning_namespace(gpu: bool = False) -> dict[str, Any]:
    """Lightning's Trainer and strategies (real, defaults refused; DDP keyword arguments of
    DDPStrategy checked against DistributedDataParallel) and a LightningModule as ``self``."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
    from torch.nn.parallel import DistributedDataParallel

    def ddp_strategy(**kwargs: Any) -> Any:
        strategy_params = inspect.signature(DDPStrategy.__init__).parameters
        ddp_kwargs = {k: v for k, v in kwargs.items() if k not in strategy_params}
        checked("DistributedDataParallel", DistributedDataParallel, run=False)(
            nn.Linear(1, 1), **ddp_kwargs
        )
        return DDPStrategy(**kwargs)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = Net()
            self.train_set = torch.utils.data.TensorDataset(torch.randn(8, 8))

    module = Module()
    module.log = checked("LightningModule.log", module.log, run=False)  # type: ignore[method-assign]
    trainer = checked("Trainer", pl.Trainer, run=not gpu)

    def build_trainer(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("logger", False) if not gpu else None
        return trainer(*args, **kwargs)

    return {
        "Trainer": build_trainer,
        "DDPStrategy": ddp_strategy,
        "FSDPStrategy": checked("FSDPStrategy", FSDPStrategy, run=False),
        "self": module,
    }


def transformers_namespace(gpu: bool = False) -> dict[str, Any]:
    """transformers' TrainingArguments, built for real on the CPU (GPU-only options bound)."""
    from transformers import TrainingArguments

    tmp = tempfile.mkdtemp()

    def args(*a: Any, **kwargs: Any) -> Any:
        _defaults_check("TrainingArguments", TrainingArguments, kwargs)
        if gpu:
            return checked("TrainingArguments", TrainingArguments, run=False)(*a, **kwargs)
        return TrainingArguments(*a, output_dir=tmp, use_cpu=True, report_to=[], **kwargs)

    return {"TrainingArguments": args}
