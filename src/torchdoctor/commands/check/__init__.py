"""``torchdoctor check``: the command line (``cli.py``, ``args.py``), the run under watch in a
watched child (``watcher.py``), and rank 0's report (``summary.py``, ``publish.py``)."""
