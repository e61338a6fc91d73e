"""The seven trace findings moved into families (host, loading, waits) are family rules in the
registry; each family's own module (``test_family_<module>.py``, on the corpus traces of
``trace_cases.py``) holds that its spec's threshold decides where it fires."""

from __future__ import annotations

from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.registry import REGISTRY

RULES = {r.spec.id: r for r in FAMILY_RULES}
MOVED = (
    "host-bound",
    "data-loading-bound",
    "pageable-h2d-copies",
    "dependency-waits",
    "input-pipeline",
    "synchronous-copies",
    "low-gpu-utilization",
)


def test_the_moved_findings_are_family_rules_in_the_registry() -> None:
    for fid in MOVED:
        assert fid in RULES, fid
        assert REGISTRY[fid] is RULES[fid].spec
        assert RULES[fid].measure.__module__.startswith("torchdoctor.rules.families.")


def test_unexplained_time_in_pooling_points_at_channels_last() -> None:
    """A step far off the roofline in NCHW max pooling (9x slower than channels_last on one
    CPU) is told the memory format; one in a matmul is not."""
    from torchdoctor.rules.mode_fixes import unexplained_fix

    pool = unexplained_fix("torch ops", "infer.py:34", ["aten::max_pool2d", "aten::conv2d"])
    assert "model = model.to(memory_format=torch.channels_last)" in pool
    assert "aten::max_pool2d" in pool.splitlines()[0]
    mm = unexplained_fix("torch ops", "train.py:12", ["aten::addmm", "aten::relu"])
    assert "channels_last" not in mm and "torch.compile" in mm
