"""A trial applies its configuration one way: through ``torchdoctor.Runtime``, with the runtime's
own optimizer rebuilder; what it cannot apply fails the trial instead of being timed as the
default under the new label."""

from __future__ import annotations

import pytest
import torch

from torchdoctor.config import RuntimeConfig
from torchdoctor.runtime.runtime import Runtime
from torchdoctor.tune import adapter


def _adamw() -> torch.optim.AdamW:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    return torch.optim.AdamW(layer.parameters(), lr=3e-4, weight_decay=0.05)


def test_a_trial_backend_is_a_runtime_with_the_trials_settings() -> None:
    backend = adapter.TrialBackend(RuntimeConfig(grad_accumulation=2, num_workers=0))
    assert isinstance(backend.rt, Runtime)
    assert backend.rt.config.grad_accumulation == 2
    # The worker rebuilt the optimizer already; the runtime must not rebuild it a second time.
    assert backend.rt.config.optimizer_impl == "default"
    assert not hasattr(adapter, "LocalBackend")


def test_rebuild_keeps_groups_and_options_and_sets_one_implementation() -> None:
    opt = _adamw()
    rebuilt = adapter.rebuild_optimizer(opt, "foreach")
    assert rebuilt is not opt and type(rebuilt) is torch.optim.AdamW
    group = rebuilt.param_groups[0]
    assert group["foreach"] is True and group["lr"] == 3e-4 and group["weight_decay"] == 0.05
    assert group["params"] == opt.param_groups[0]["params"]
    assert adapter.rebuild_optimizer(opt, "default") is opt


def test_rebuild_refuses_what_the_runtime_would_only_log() -> None:
    opt = _adamw()
    opt.param_groups[0]["params"][0].grad = torch.ones(2, 4)
    opt.step()  # it has state now: a rebuilt optimizer would silently drop it
    with pytest.raises(ValueError, match="already has state"):
        adapter.rebuild_optimizer(opt, "foreach")
    sgd_like = torch.optim.LBFGS(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="no fused implementation"):
        adapter.rebuild_optimizer(sgd_like, "fused")
