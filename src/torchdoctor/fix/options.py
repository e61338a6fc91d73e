"""``torchdoctor fix``'s options, typed: the command line builds one, ``run_fix`` reads it, and
its :meth:`FixOptions.to_dict` is the ``options`` object of ``fix --json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["diff", "write"]


@dataclass(frozen=True)
class FixOptions:
    """What one ``fix`` run was asked for (the defaults are the command line's)."""

    mode: Mode = "diff"
    """``diff`` prints the patch, ``write`` applies it (originals kept as ``FILE.orig``)."""
    prove: bool = False
    """Measure each change against the original in interleaved fresh processes."""
    min_gain: float = 0.02
    """A proven change is kept when its speed-up interval clears ``1 + min_gain``."""
    keep_unproven: bool = False
    rounds: int = 8
    prove_steps: int = 30
    """Measured steps per proving process, after ``warmup``."""
    warmup: int = 5
    """Warm-up steps, for ``check`` and for each proving process."""
    seed: int = 0
    only: tuple[str, ...] | None = None
    """Fix only these finding ids."""
    include_all: bool = False
    """Also propose changes for info findings and those predicted within noise (``--all``)."""
    check_steps: int = 5
    """Steps ``check`` profiles when fix runs it."""
    out_dir: str = "torchdoctor-runs"
    """Parent folder of check's run folders."""

    @staticmethod
    def parse_only(text: str | None) -> tuple[str, ...] | None:
        """``--only a,b`` as ids; None when not given or empty."""
        ids = tuple(x.strip() for x in (text or "").split(",") if x.strip())
        return ids or None

    def to_dict(self) -> dict[str, Any]:
        """The options as ``fix --json`` records them."""
        return {
            "mode": self.mode,
            "prove": self.prove,
            "min_gain": self.min_gain,
            "keep_unproven": self.keep_unproven,
            "rounds": self.rounds,
            "prove_steps": self.prove_steps,
            "warmup": self.warmup,
            "seed": self.seed,
            "only": list(self.only) if self.only else None,
            "all": self.include_all,
        }
