"""``Runtime``: the object a user adds to their own training loop.

It owns the decisions (device, precision, compile, DDP, data loading, accumulation) and the
meter; the mechanics live in the sibling modules, one concept each.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, overload

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.data import Dataset

import torchdoctor.runtime.checkpoint as checkpoint
import torchdoctor.runtime.distributed as distributed
import torchdoctor.runtime.log as log
from torchdoctor.capture.script_arm import seed_everything
from torchdoctor.config import RuntimeConfig
from torchdoctor.errors import UserError
from torchdoctor.runtime.compile_guard import RecompileGuard
from torchdoctor.runtime.data import DevicePrefetcher, RuntimeLoader, build_dataloader, plan_loader
from torchdoctor.runtime.flops import FlopProbe
from torchdoctor.runtime.log import logger
from torchdoctor.runtime.memory_history import MemoryHistory
from torchdoctor.runtime.meter import Meter
from torchdoctor.runtime.module import RuntimeModule
from torchdoctor.runtime.optim import apply_optimizer_impl
from torchdoctor.runtime.precision import PrecisionPlugin
from torchdoctor.runtime.strategy import Strategy, WrapPolicy, select_strategy
from torchdoctor.runtime.transfer import batch_counts, map_tensors, tensor_mover

_FLOP_STEP = 1  # count FLOPs in the second step: the first one warms up (and compiles)


def _merge(config: RuntimeConfig | None, settings: dict[str, Any]) -> RuntimeConfig:
    """``config`` with keyword settings applied over it, validated (unknown keys named)."""
    base = config or RuntimeConfig()
    if not isinstance(base, RuntimeConfig):
        raise UserError(f"config must be a RuntimeConfig; got {type(base).__name__}")
    if not settings:
        return base
    return RuntimeConfig.from_dict({**base.to_dict(), **settings}, source="Runtime")


class Runtime:
    """Applies a :class:`RuntimeConfig` to a training loop; see ``docs/runtime.md``.

    Keyword arguments are ``RuntimeConfig`` fields (``precision="auto"``, ``compile="default"``,
    ...), applied over ``config``. ``device`` overrides the device choice, ``scaler`` supplies a
    GradScaler (fp16 only), ``flops_per_step`` replaces the FLOP count the meter measures and
    ``compile_backend`` is torch.compile's backend ("aot_eager" compiles in a fraction of the time,
    for debugging). ``wrap_policy`` picks FSDP2's units (block classes, or a function of a module;
    default: the blocks of each ``nn.ModuleList``). ``memory_history=True`` (or a folder) records
    CUDA allocation history with Python stacks and, on out-of-memory, dumps a snapshot and logs
    what ``torchdoctor memory`` finds in it (see ``docs/memory.md``).
    """

    def __init__(
        self,
        config: RuntimeConfig | None = None,
        *,
        device: str | torch.device | None = None,
        scaler: Any | None = None,
        flops_per_step: float | None = None,
        compile_backend: str = "inductor",
        wrap_policy: WrapPolicy | Iterable[type[nn.Module]] | None = None,
        memory_history: bool | str | Path = False,
        **settings: Any,
    ) -> None:
        self.config = _merge(config, settings)
        info = distributed.detect()
        log.configure(info.rank)
        self.device = distributed.select_device(device, info)
        self.dist = distributed.init_process_group(info, self.device)
        log.configure(self.dist.rank)
        if self.config.seed is not None:
            seed_everything(self.config.seed)
        self.precision_plugin = PrecisionPlugin.choose(
            self.config.precision, self.device, allow_tf32=self.config.allow_tf32, scaler=scaler
        )
        self.precision = self.precision_plugin.plan
        self.scaler = self.precision_plugin.scaler
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = self.config.cudnn_benchmark
        self.strategy: Strategy
        self.strategy, why = select_strategy(
            self.config.strategy,
            self.dist,
            self.device,
            self.precision_plugin,
            bucket_cap_mb=self.config.ddp_bucket_cap_mb,
            wrap_policy=wrap_policy,
        )
        self.meter = Meter(
            self.device, peak_dtype=self.precision.peak_dtype, flops_per_step=flops_per_step
        )
        self._measure_flops = flops_per_step is None
        self._probe: FlopProbe | None = None
        self._modules: list[RuntimeModule] = []
        self._accum = self.config.grad_accumulation
        self._compile_backend = compile_backend
        self._micro = 0
        self._optimizer_note: str | None = None
        self._loader_plan: dict[str, Any] | None = None
        logger.info("precision %s: %s", self.precision.precision, self.precision.reason)
        logger.info("strategy %s: %s", self.strategy.name, why)
        self.memory_history: MemoryHistory | None = None
        if memory_history:  # opt-in: stacks per allocation; snapshot + analysis on OOM
            folder = "." if memory_history is True else memory_history
            self.memory_history = MemoryHistory(self.device, folder)
            self.memory_history.start()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Runtime:
        """A runtime configured by a TOML file; keyword arguments as for ``Runtime(...)``."""
        return cls(RuntimeConfig.from_file(path), **kwargs)

    # -- where this process is ----------------------------------------------------------------
    @property
    def rank(self) -> int:
        """Global rank (0 in a single process)."""
        return self.dist.rank

    @property
    def local_rank(self) -> int:
        """Rank on this machine."""
        return self.dist.local_rank

    @property
    def world_size(self) -> int:
        """Number of processes."""
        return self.dist.world_size

    @property
    def is_global_zero(self) -> bool:
        """True on the process that should log and save."""
        return self.dist.rank == 0

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on rank 0 only."""
        if self.is_global_zero:
            print(*args, **kwargs)

    # -- model and optimizer ------------------------------------------------------------------
    @overload
    def setup(self, model: nn.Module) -> RuntimeModule: ...
    @overload
    def setup(self, model: nn.Module, optimizer: Optimizer) -> tuple[RuntimeModule, Optimizer]: ...

    def setup(self, model: nn.Module, optimizer: Optimizer | None = None) -> Any:
        """Move ``model`` to the device (channels_last if asked), hand it to the strategy (DDP or
        FSDP2 under torchrun), compile it if asked, and rebuild ``optimizer`` with
        ``optimizer_impl`` while it is fresh. With FSDP2 the optimizer must be created after
        ``setup`` (it has to hold the sharded parameters): call ``setup(model)``, then build it and
        call ``setup_optimizer``. Returns ``model`` or ``(model, optimizer)``."""
        if isinstance(model, RuntimeModule):
            raise UserError("this model was already set up; pass the original module")
        model = model.to(self.device)
        if self.config.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if optimizer is not None and self.strategy.name == "fsdp":
            raise UserError(
                "with strategy='fsdp' create the optimizer after setup: model = rt.setup(model); "
                "opt = AdamW(model.parameters()); opt = rt.setup_optimizer(opt)"
            )
        forward = self.strategy.setup_module(model)
        self._sync_flag()
        eager, guard = forward, None
        if self.config.compile != "off":
            # mode is an inductor setting; other backends reject it.
            inductor = self._compile_backend == "inductor"
            mode = None if self.config.compile == "default" or not inductor else self.config.compile
            forward = torch.compile(
                forward, mode=mode, dynamic=self.config.dynamic, backend=self._compile_backend
            )  # type: ignore[assignment]
            guard = RecompileGuard(
                model, max_recompiles=self.config.max_recompiles, on_compile=self.meter.note_compile
            )
        wrapped = RuntimeModule(
            model,
            forward,
            guard=guard,
            eager=eager,
            on_first_call=self.meter.start,
            strategy=self.strategy,
        )
        self._modules.append(wrapped)
        if optimizer is None:
            return wrapped
        return wrapped, self.setup_optimizer(optimizer)

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """``optimizer`` rebuilt with ``optimizer_impl`` while it is fresh (or as it is, with a
        logged reason); use the returned object from then on."""
        optimizer, self._optimizer_note = apply_optimizer_impl(
            optimizer, self.config.optimizer_impl
        )
        if self._optimizer_note:
            logger.info(self._optimizer_note)
        return optimizer

    # -- the loop -----------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward-pass context for the chosen precision (a no-op for fp32 / tf32)."""
        return self.precision_plugin.forward_context()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation count and scaled for fp16."""
        if self._accum > 1:
            loss = loss / self._accum
        self.precision_plugin.scale_loss(loss).backward(**kwargs)
        self._micro += 1
        self._sync_flag()
        if self._probe is not None and self._micro >= self._accum:
            self._finish_flop_count()

    @property
    def at_step_boundary(self) -> bool:
        """True when the next ``step`` really steps (the last micro-batch of an accumulation)."""
        return self._micro >= self._accum

    def clip_gradients(
        self, model: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor | None:
        """Clip the total gradient norm to ``max_norm`` (unscaling fp16 gradients first); returns
        the norm before clipping, or None on an inner accumulation step."""
        if not self.at_step_boundary:
            return None
        self.precision_plugin.unscale(optimizer)
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def step(self, optimizer: Optimizer) -> bool:
        """Step ``optimizer`` and zero its gradients, on the last micro-batch only; returns
        whether it stepped. Skipped fp16 steps (inf/NaN gradients) are counted by the meter."""
        if self._micro < self._accum and self._micro > 0:
            return False
        if self._probe is not None:
            self._finish_flop_count()
        skipped = self.precision_plugin.optimizer_step(optimizer)
        if skipped is not None:
            self.meter.skipped = self.meter.skipped + skipped
        optimizer.zero_grad(set_to_none=True)
        self._micro = 0
        self._sync_flag()
        self.meter.step_end()
        if self._measure_flops and self.meter.steps == _FLOP_STEP:
            self._arm_flop_count()
        if self.memory_history is not None and self.memory_history.pending:
            self.memory_history.report()  # a caught OOM: analysed here, not in the allocator
        return True

    @contextlib.contextmanager
    def accumulate(self, n: int | None = None) -> Iterator[None]:
        """Accumulate gradients over ``n`` micro-batches inside this block (default: the
        configured ``grad_accumulation``). Inner micro-batches skip DDP's all-reduce (no_sync)
        and ``step``; the loss is divided by ``n`` so the update equals one large batch's."""
        n = self.config.grad_accumulation if n is None else n
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UserError(f"accumulate(n) needs a positive integer; got {n!r}")
        previous, self._accum = self._accum, n
        self._sync_flag()
        try:
            yield
        finally:
            self._accum = previous
            self._sync_flag()

    def _sync_flag(self) -> None:
        # Reduce gradients only in the backward that ends an accumulation (no_sync otherwise).
        self.strategy.set_grad_sync(self._micro >= self._accum - 1)

    # -- FLOP counting ------------------------------------------------------------------------
    def _arm_flop_count(self) -> None:
        # Count from the next training forward to the backward that ends the step, so the
        # window never stays open over evaluation or the end of training.
        for m in self._modules:
            m.set_before_call(self._start_flop_count)

    def _start_flop_count(self) -> None:
        if self._probe is not None:
            return
        if not torch.is_grad_enabled():  # an evaluation forward: wait for a training one
            self._arm_flop_count()
            return
        for m in self._modules:
            m.set_before_call(None)
            m.set_eager(True)
        self.meter.flag_step("flops")
        self._probe = FlopProbe()
        self._probe.start()

    def _finish_flop_count(self) -> None:
        assert self._probe is not None
        count = self._probe.stop()
        self._probe = None
        self._measure_flops = False
        for m in self._modules:
            m.set_eager(False)
        if count.total:
            self.meter.flops_per_step = float(count.total)
        self.meter.flops_note = count.note
        if count.note:
            logger.warning(count.note)

    # -- data ---------------------------------------------------------------------------------
    def loader(
        self,
        dataset: Dataset[Any],
        *,
        batch_size: int | None = 1,
        shuffle: bool = False,
        **kwargs: Any,
    ) -> RuntimeLoader:
        """A DataLoader over ``dataset`` with the runtime's defaults (workers per local rank,
        pinned memory on CUDA, persistent workers, DistributedSampler under DDP) and batches
        prefetched to the device. Keyword arguments go to ``DataLoader`` and win over defaults."""
        plan = plan_loader(
            self.config,
            self.device,
            batch_size=batch_size,
            local_world_size=self.dist.local_world_size,
            distributed=self.dist.distributed,
            overrides=kwargs,
        )
        if self.config.batch_size and self.config.batch_size != batch_size:
            logger.info(
                "batch_size %d from the configuration (the script asked for %d)",
                self.config.batch_size,
                batch_size,
            )
        loader_kwargs = {
            k: v
            for k, v in kwargs.items()
            if k not in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
        }
        dataloader = build_dataloader(
            dataset,
            plan,
            shuffle=shuffle,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.config.seed or 0,
            overrides=loader_kwargs,
        )
        self._loader_plan = dataclasses.asdict(plan)
        return RuntimeLoader(dataloader, plan, self.prefetcher)

    def prefetcher(self, source: Iterable[Any]) -> DevicePrefetcher:
        """Wrap any iterable of batches: batches arrive on the device, copied ahead on CUDA."""
        return DevicePrefetcher(
            source,
            self.device,
            depth=self.config.device_prefetch,
            channels_last=self.config.channels_last,
            on_batch=self._count_batch,
        )

    def _count_batch(self, batch: Any) -> None:
        samples, tokens = batch_counts(batch)
        self.meter.count_batch(samples, tokens)

    def to_device(self, batch: Any) -> Any:
        """``batch`` (tensors in any nesting of tuples, lists, dicts, dataclasses) on the device."""
        return map_tensors(
            batch, tensor_mover(self.device, channels_last=self.config.channels_last)
        )

    # -- configuration ------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        """The effective configuration: every setting, with what ``auto`` / ``None`` resolved to,
        plus the device and process layout, for reports and run records."""
        out = self.config.to_dict()
        out.update(
            precision=self.precision.precision,
            precision_requested=self.precision.requested,
            precision_reason=self.precision.reason,
            tf32=self.precision.tf32,
            grad_scaler=self.scaler is not None,
            device=str(self.device),
            rank=self.rank,
            world_size=self.world_size,
            backend=self.dist.backend,
            **self.strategy.describe(),
            optimizer_note=self._optimizer_note,
            loader=self._loader_plan,
            torch_version=torch.__version__,
        )
        return out

    def save(self, path: str | Path) -> Path:
        """Write the configuration as TOML (what ``auto`` chose goes in a comment); returns the path."""
        note = f"precision {self.config.precision} resolved to {self.precision.precision} on {self.device}: {self.precision.reason}"
        return self.config.save(path, comment=f"torchdoctor runtime configuration\n{note}")

    def save_checkpoint(
        self, path: str | Path, model: nn.Module, optimizer: Optimizer | None = None
    ) -> Path:
        """Write the full (unsharded) model and optimizer state to ``path`` with ``torch.save``.
        Every rank must call it (FSDP2 gathers the shards); rank 0 writes. Returns the path."""
        return checkpoint.save_checkpoint(self.strategy, path, model, optimizer, self.rank)

    def load_checkpoint(
        self, path: str | Path, model: nn.Module, optimizer: Optimizer | None = None
    ) -> None:
        """Load what ``save_checkpoint`` wrote into ``model`` (and ``optimizer``) on every rank."""
        checkpoint.load_checkpoint(self.strategy, path, model, optimizer)

    def close(self) -> None:
        """Destroy the process group if this runtime created it (also runs at exit)."""
        if self.memory_history is not None:
            self.memory_history.stop()
        if distributed.created_here():
            distributed.teardown()
