"""``torchdoctor memory``: explain a CUDA memory snapshot (``command.py``)."""
