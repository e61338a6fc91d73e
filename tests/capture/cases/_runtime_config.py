"""A run-configuration object whose ``apply()`` sets process-wide switches before training."""

from dataclasses import dataclass

import torch


@dataclass
class RuntimeConfig:
    reproducible: bool = True
    threads: int = 1

    def apply(self) -> None:
        torch.set_num_threads(self.threads)
        torch.backends.mkldnn.enabled = not self.reproducible  # planted when reproducible
