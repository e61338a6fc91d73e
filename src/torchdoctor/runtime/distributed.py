"""Process group and device selection under torchrun (wrapping the model is in ``strategy``).

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; without them the runtime is a
single process and nothing here initialises anything.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchdoctor.errors import UserError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int
    """Global rank (0 in a single process)."""
    local_rank: int
    """Rank on this machine; selects the GPU."""
    world_size: int
    """Processes in the job."""
    local_world_size: int
    """Processes on this machine (shares the CPUs for DataLoader workers)."""
    backend: str | None = None
    """Process-group backend (nccl, gloo), None in a single process."""

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise UserError(f"environment variable {key} must be an integer; got {value!r}") from None


def detect(env: Mapping[str, str] | None = None) -> DistInfo:
    """Read the torchrun variables (single process when they are absent)."""
    env = os.environ if env is None else env
    world = _env_int(env, "WORLD_SIZE", 1)
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    return DistInfo(
        rank=_env_int(env, "RANK", 0),
        local_rank=local_rank,
        world_size=world,
        local_world_size=_env_int(env, "LOCAL_WORLD_SIZE", world),
    )


def select_device(requested: str | torch.device | None, info: DistInfo) -> torch.device:
    """The requested device, else this local rank's GPU, else the CPU."""
    if requested is not None:
        device = torch.device(requested)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", info.local_rank)
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def init_process_group(info: DistInfo, device: torch.device) -> DistInfo:
    """Initialise the default process group if torchrun asked for one; returns ``info`` with the
    backend. A group the application already created is used as is (a one-process group too:
    ``strategy="ddp"`` / ``"fsdp"`` then run over it), and left for it to close."""
    if dist.is_available() and dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return DistInfo(
            rank=dist.get_rank(),
            local_rank=info.local_rank,
            world_size=dist.get_world_size(),
            local_world_size=info.local_world_size,
            backend=str(dist.get_backend()),
        )
    if not info.distributed:
        return info
    if device.type == "cuda":
        # Bind before creating the group so NCCL's communicators land on this rank's GPU.
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    _CREATED.append(True)
    atexit.register(teardown)
    return DistInfo(**{**info.__dict__, "backend": backend})


_CREATED: list[bool] = []  # non-empty once this module created the default group


def created_here() -> bool:
    """Whether the runtime (not the application) created the default process group."""
    return bool(_CREATED)


def teardown() -> None:
    """Destroy the default process group if one is up (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _CREATED.clear()


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
