"""The scripts of ``examples/heldout``: mistakes written blind, in shapes no rule was written
against (a helper module, a class method, a closure, a context manager), and two healthy
controls. Kept apart from ``examples/unlisted`` (rules have been written against those); see
``examples/heldout/README.md``. Used by ``validate_remedies.py``."""

from __future__ import annotations

from pathlib import Path

from unlisted_cases import Case

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "heldout"


class HeldoutCase(Case):
    """A case of ``examples/heldout`` (the same fields as an unlisted case)."""

    @property
    def path(self) -> Path:
        return FOLDER / self.script


CASES: tuple[Case, ...] = (
    HeldoutCase(
        "seeded_helper.py",
        "deterministic algorithms switched on inside a helper module's seed function",
        ("deterministic-algorithms",),
        "torch.use_deterministic_algorithms(True, warn_only=True)",
    ),
    HeldoutCase(
        "trainer_rebuilds_optim.py",
        "AdamW rebuilt every step by a Trainer method",
        ("repeated-construction",),
        "return torch.optim.AdamW(",
    ),
    HeldoutCase(
        "closure_holdout_loss.py",
        "hold-out metric forward with grad every step, in a closure",
        ("grad-without-backward",),
        "pred = net(xs)",
    ),
    HeldoutCase(
        "anomaly_context.py",
        "detect_anomaly() context manager left around the step",
        ("anomaly-detection",),
        "with torch.autograd.detect_anomaly(check_nan=True):",
    ),
    HeldoutCase(
        "onednn_flags_ctx.py",
        "oneDNN off through mkldnn.flags(enabled=False) around the loop",
        ("backend-disabled",),
        "with torch.backends.mkldnn.flags(enabled=False):",
    ),
    HeldoutCase(
        "gru_unrolled_method.py",
        "GRUCell stepped over time in a forward method",
        ("module-call-loop", "host-bound", "unexplained-step-time"),
        "h = self.cell(seq[:, t], h)",
    ),
    HeldoutCase(
        "activation_stats_hooks.py",
        "forward hooks registered every step by a helper, never removed",
        ("repeated-construction",),
        "mod.register_forward_hook(",
    ),
    HeldoutCase(
        "augmenting_dataset.py",
        "Python augmentation per item, loaded with num_workers=0",
        ("dataloader-config", "data-loading-bound"),
        "feed = DataLoader(JitterDataset(2048), batch_size=32, shuffle=True)",
    ),
    # written after a remedy was changed because of a case above, and not looked at while
    # changing it: where the change is shown on a case it was not written against
    HeldoutCase(
        "backend_off_in_setup.py",
        "oneDNN switched off by a reproducibility helper before training",
        ("backend-disabled",),
        "torch.backends.mkldnn.enabled = False",
    ),
    HeldoutCase(
        "optimizer_per_epoch_batch.py",
        "SGD rebuilt for every batch of a nested epoch loop",
        ("repeated-construction",),
        "sgd = torch.optim.SGD(clf.parameters()",
    ),
    HeldoutCase("control_trainer_class.py", "", (), ""),
    HeldoutCase("control_batched_scoring.py", "", (), ""),
)
