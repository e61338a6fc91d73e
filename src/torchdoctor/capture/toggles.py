"""The toggles ``check`` can measure inside a run (see ``capture/experiments.py``), each built
only from evidence the run already has: the mode was on during the measured steps, the forwards
at a line never reached a backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchdoctor.capture.callsites import user_site
from torchdoctor.capture.experiments import Toggle
from torchdoctor.capture.patches import Patcher
from torchdoctor.capture.repeats import RepeatWatch
from torchdoctor.code_paths import CodePaths


def anomaly_off() -> Toggle:
    """Anomaly detection off for the changed steps, even where the script re-enters
    ``detect_anomaly()`` every step (its ``torch.set_anomaly_enabled(True)`` is held off)."""
    import torch

    prev = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    orig = torch.set_anomaly_enabled
    patcher = Patcher()

    def forced_off(enabled: bool, check_nan: bool = True) -> None:
        orig(False, check_nan)

    def apply() -> None:
        if not patcher.installed():
            patcher.patch(torch, "set_anomaly_enabled", forced_off)
        orig(False, prev[1])

    def restore() -> None:
        patcher.restore()
        orig(*prev)

    return Toggle("anomaly-detection", "anomaly detection off", apply, restore)


def deterministic_off(setter: Callable[..., None] | None = None) -> Toggle:
    """``torch.use_deterministic_algorithms(False)`` for the changed steps (``setter``: torch's
    own function, not our recording wrapper)."""
    import torch

    use = setter or torch.use_deterministic_algorithms
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    return Toggle(
        "deterministic-algorithms",
        "deterministic algorithms off",
        lambda: use(False),
        lambda: use(True, warn_only=warn_only),
    )


def more_threads(set_threads: Callable[[int], None], user: int, cores: int) -> Toggle:
    """``torch.set_num_threads(cores)`` for the changed steps (``set_threads`` is the original
    function, not our recording wrapper); measured after the other toggles (``last``): with
    other processes on the cores, 2 threads ran steps 6-44x slower and used up the extra
    steps' time limit before oneDNN's or determinism's toggle ran."""
    return Toggle(
        "few-intra-op-threads",
        f"{cores} intra-op threads instead of {user}",
        lambda: set_threads(cores),
        lambda: set_threads(user),
        last=True,
    )


def backend_on(flag_owner: Any, name: str, finding: str = "backend-disabled") -> Toggle:
    """``torch.backends.<name>.enabled = True`` for the changed steps."""
    prev = bool(flag_owner.enabled)

    def apply() -> None:
        flag_owner.enabled = True

    def restore() -> None:
        flag_owner.enabled = prev

    return Toggle(finding, f"torch.backends.{name}.enabled = True", apply, restore)


class _NoGradAt:
    """Global module hooks that run the outermost forwards called from ``sites`` without grad
    while ``on``; installed for both arms, so both pay the hooks' own cost."""

    def __init__(self, paths: CodePaths, sites: set[str]) -> None:
        self.paths, self.sites = paths, sites
        self.on = False
        self._depth = 0
        self._saved: list[bool | None] = []
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.nn.modules import module

        if not self._handles:
            self._handles = [
                module.register_module_forward_pre_hook(self._pre),
                module.register_module_forward_hook(self._post),
            ]

    def uninstall(self) -> None:
        from torchdoctor.capture import guest

        for h in self._handles:
            guest.remove_hook(h)
        self._handles = []
        self.on = False
        self._restore_all()

    def _pre(self, module: Any, args: Any) -> None:
        import torch

        if self._depth == 0:
            hit = self.on and user_site(self.paths, skip=1) in self.sites
            self._saved.append(torch.is_grad_enabled() if hit else None)
            if hit:
                torch.set_grad_enabled(False)
        self._depth += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        import torch

        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self._saved:
            prev = self._saved.pop()
            if prev is not None:
                torch.set_grad_enabled(prev)

    def _restore_all(self) -> None:
        import torch

        # A forward that raised never reached its post-hook: put grad mode back as it was.
        for prev in self._saved:
            if prev is not None:
                torch.set_grad_enabled(prev)
                break
        self._saved.clear()
        self._depth = 0


def no_grad_at(paths: CodePaths, sites: set[str]) -> Toggle:
    """The outermost forwards called from ``sites`` run without grad in the changed steps."""
    hooks = _NoGradAt(paths, sites)
    hooks.install()

    def apply() -> None:
        hooks._restore_all()
        hooks.on = True

    def restore() -> None:
        hooks.on = False
        hooks._restore_all()

    return Toggle(
        "grad-without-backward",
        "no grad for the forwards at " + ", ".join(sorted(sites)),
        apply,
        restore,
        cleanup=hooks.uninstall,
    )


def optimizer_built_once(watch: RepeatWatch, sites: set[str]) -> Toggle:
    """The optimizers built every step at ``sites`` keep the state of the one built before
    them in the changed steps, as one optimizer built before the loop would: what rebuilding
    costs where it lands (``step()`` creating Adam's moments or SGD's momentum again, and
    whatever its first step does besides), measured rather than read from the trace. Both arms
    still run the constructor (the finding times it at its line)."""
    watch.keep_sites = frozenset(sites)

    def apply() -> None:
        watch.keep_state = True

    def restore() -> None:
        watch.keep_state = False

    return Toggle(
        "repeated-construction",
        "the optimizer at " + ", ".join(sorted(sites)) + " built once (its state kept)",
        apply,
        restore,
        cleanup=watch.stop_keeping,
    )
