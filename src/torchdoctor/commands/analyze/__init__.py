"""``torchdoctor analyze``: a trace file (``trace.py``) or a folder of per-rank traces
(``ranks.py``, whose per-rank tasks run on an executor from ``executors.py``)."""
