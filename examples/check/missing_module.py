"""Planted situation: the script imports a module that is not installed (a typo of
``transformers``). ``check`` must report the import error as such, with no step advice, and
exit with the script's status (1)."""

import torch
import tranformers  # noqa: F401  (the typo is the point)

model = torch.nn.Linear(4, 4)
