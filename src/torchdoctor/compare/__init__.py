"""``torchdoctor compare BASE NEW``: what changed between two runs, and a gate for CI."""
