"""Callbacks for the frameworks users train with: PyTorch Lightning
(``torchdoctor.integrations.lightning``) and the Hugging Face ``Trainer``
(``torchdoctor.integrations.transformers``).

Each callback does what ``torchdoctor check`` does (skip warm-up steps, profile a window, collect
compile, DataLoader, precision and sync evidence, write the run folder and report) from inside the
framework's own loop, and phrases the fixes in that framework's settings. Importing
``torchdoctor`` never imports a framework: only these submodules do.
"""
