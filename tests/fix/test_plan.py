"""The planner on hand-written run records and scripts: where each codemod looks, what it
refuses (two candidate sites, library code, a class without the option), how changes compose."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from torchdoctor.fix import planner
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef
from torchdoctor.fix.registry import CODEMODS, codemods_for
from torchdoctor.record.run import RunRecord

GPU = {"device": {"name": "NVIDIA A100", "bf16_tensor_cores": True, "tf32_capable": True}}


def script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def ctx(tmp_path: Path, path: Path, record: dict[str, Any] | None = None) -> FixContext:
    return FixContext(RunRecord.from_dict(record or {}), str(tmp_path), str(path))


def finding(fid: str, **evidence: Any) -> FindingRef:
    return FindingRef(fid, saving_ms_per_step=5.0, evidence={"mean_step_ms": 20.0, **evidence})


def only(changes: Any) -> Any:
    assert len(changes) == 1, changes
    return changes[0]


LOADER_RAW = {"num_workers": 0, "pin_memory": False, "cpus_per_rank": 4, "batch_size": 8}


def test_every_registered_codemod_is_known() -> None:
    from torchdoctor.rules.registry import REGISTRY

    named = {c for s in REGISTRY.values() for c in s.codemods}
    assert named <= set(CODEMODS)
    assert codemods_for("dataloader-config") == ("dataloader-args", "non-blocking-copies")
    assert codemods_for("anomaly-detection") == ("anomaly-off",)
    assert codemods_for("grad-without-backward") == ("inference-mode",)
    assert codemods_for("graph-breaks") == ()


def test_loader_without_a_recorded_site_and_two_candidates_is_refused(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        """
        from torch.utils.data import DataLoader
        train = DataLoader(a, batch_size=8)
        val = DataLoader(b, batch_size=8)
        """,
    )
    c = only(
        planner.plan(
            [finding("dataloader-config", dataloader=LOADER_RAW, suggested_num_workers=4)],
            ctx(tmp_path, p),
        ).changes
    )
    assert c.status == "refused"
    assert "2 candidate sites for DataLoader(...) (train.py:2, train.py:3)" in c.reason


def test_loader_in_library_code_is_refused(tmp_path: Path) -> None:
    p = script(tmp_path, "import torch\n")
    lib = torch.utils.data.dataloader.__file__
    raw = {
        **LOADER_RAW,
        "call": {"site": f"{lib}:10", "func": "DataLoader", "args": [], "kwargs": {}},
    }
    c = only(
        planner.plan(
            [finding("dataloader-config", dataloader=raw, suggested_num_workers=4)],
            ctx(tmp_path, p),
        ).changes
    )
    assert c.status == "refused"
    assert "comes from library code" in c.reason


def test_loader_with_workers_at_the_cpu_count_needs_cheaper_items(tmp_path: Path) -> None:
    p = script(tmp_path, "from torch.utils.data import DataLoader\nDataLoader(a, num_workers=4)\n")
    raw = {
        **LOADER_RAW,
        "num_workers": 4,
        "persistent_workers": True,
        "prefetch_factor": 4,
        "explicit": {"prefetch_factor": "4"},
    }
    c = only(
        planner.plan(
            [finding("dataloader-config", dataloader=raw, suggested_num_workers=4)],
            ctx(tmp_path, p),
        ).changes
    )
    assert c.status == "already"
    assert "already uses this rank's 4 CPUs" in c.reason
    # items measured to wait (I/O): the report's remedy reads the batch concurrently, and so
    # does the refusal (never "uses the CPUs" for workers that sleep)
    waits = finding("dataloader-config", dataloader=raw, suggested_num_workers=4, on_cpu_share=0.05)
    c = only(planner.plan([waits], ctx(tmp_path, p)).changes)
    assert c.status == "already" and "CPUs" not in c.reason
    assert c.reason.startswith("num_workers=4 already, for items that wait: read each batch")


def test_pinned_loader_on_cuda_also_gets_non_blocking_copies(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=8)
        for x, y in loader:
            x, y = x.to("cuda"), y.to("cuda")
        """,
    )
    raw = {**LOADER_RAW, "call": {"site": f"{p}:2"}}
    changes = planner.plan(
        [finding("dataloader-config", dataloader=raw, suggested_num_workers=4)],
        ctx(tmp_path, p, {"gpu": GPU}),
    ).changes
    assert [(c.codemod, c.status) for c in changes] == [
        ("dataloader-args", "patched"),
        ("non-blocking-copies", "patched"),
    ]
    assert "pin_memory=True" in changes[0].diff
    patch = planner.patch_of(
        planner.plan(
            [finding("dataloader-config", dataloader=raw, suggested_num_workers=4)],
            ctx(tmp_path, p, {"gpu": GPU}),
        ),
        changes,
    )
    assert (
        "+loader = DataLoader(ds, batch_size=8, num_workers=4, persistent_workers=True, prefetch_factor=4, pin_memory=True)"
        in patch
    )
    assert '+    x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)' in patch


def test_non_blocking_is_not_proposed_without_a_gpu(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\nfor x in loader:\n    x = x.to('cpu')\n",
    )
    raw = {**LOADER_RAW, "call": {"site": f"{p}:2"}}
    changes = planner.plan(
        [finding("dataloader-config", dataloader=raw, suggested_num_workers=4)], ctx(tmp_path, p)
    ).changes
    assert [c.codemod for c in changes] == ["dataloader-args"]
    assert "pin_memory" not in changes[0].diff


MODES = {"intra_op_threads": 1}


@pytest.mark.parametrize(
    ("cls", "status", "expect"),
    [
        ("Adam", "patched", "fused=True"),  # fused on the CPU in the torch in use
        ("Adadelta", "patched", "foreach=True"),  # no fused kernel: foreach
        ("LBFGS", "refused", "accepts neither fused=True nor foreach=True"),
    ],
)
def test_optimizer_option_follows_the_real_signature(
    tmp_path: Path, cls: str, status: str, expect: str
) -> None:
    p = script(tmp_path, f"import torch\nopt = torch.optim.{cls}(model.parameters(), lr=0.1)\n")
    rows = [{"class": cls, "impl": "for-loop", "param_devices": ["cpu"]}]
    c = only(
        planner.plan(
            [finding("host-bound", for_loop_optimizers=rows)],
            # one intra-op thread: the CPU run keeps fused where the class has it
            ctx(tmp_path, p, {"compile": {"compile_calls": [{"mode": None}]}, "modes": MODES}),
        ).changes[:1]
    )
    assert c.status == status
    assert expect in (c.diff or c.reason)


def test_optimizer_from_elsewhere_or_built_twice_is_refused(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        "import torch\na = torch.optim.SGD(m1.parameters(), lr=1)\nb = torch.optim.SGD(m2.parameters(), lr=1)\n",
    )
    rows = [{"class": "SGD", "impl": "for-loop"}]
    c = planner.plan([finding("host-bound", for_loop_optimizers=rows)], ctx(tmp_path, p)).changes[0]
    assert c.status == "refused" and "2 candidate sites for SGD(...)" in c.reason
    rows = [{"class": "FusedLAMB", "impl": "for-loop"}]
    c = planner.plan([finding("host-bound", for_loop_optimizers=rows)], ctx(tmp_path, p)).changes[0]
    assert c.status == "refused" and "FusedLAMB is not a torch.optim optimizer" in c.reason


def test_an_already_compiled_model_gets_the_next_mode_on_a_gpu_only(tmp_path: Path) -> None:
    p = script(tmp_path, "import torch\nc = torch.compile(model)\n")
    record = {"compile": {"compile_calls": [{"mode": None}]}}
    cpu = [
        c
        for c in planner.plan([finding("host-bound")], ctx(tmp_path, p, record)).changes
        if c.codemod == "compile-model"
    ]
    assert only(cpu).status == "refused" and "no torch.compile mode adds more" in only(cpu).reason
    gpu = [
        c
        for c in planner.plan(
            [finding("host-bound")], ctx(tmp_path, p, {**record, "gpu": GPU})
        ).changes
        if c.codemod == "compile-model"
    ]
    assert (
        only(gpu).status == "patched"
        and '+c = torch.compile(model, mode="reduce-overhead")' in only(gpu).diff
    )
    breaks = {
        **record,
        "gpu": GPU,
        "compile": {**record["compile"], "graph_breaks": [{"site": "train.py:9"}]},
    }
    gb = [
        c
        for c in planner.plan([finding("host-bound")], ctx(tmp_path, p, breaks)).changes
        if c.codemod == "compile-model"
    ]
    assert "fix the graph breaks first" in only(gb).reason


def test_no_compile_while_a_hook_is_registered_every_step(tmp_path: Path) -> None:
    """Held-out ``activation_stats_hooks.py`` registers forward hooks every step: patched with
    ``model.compile()`` it recompiled 10 times (26.8 s), hit the recompile limit and broke
    the graph at the hooks' ``float()``, the hooks still piling up."""
    import shutil

    src = Path(__file__).resolve().parents[2] / "examples" / "heldout" / "activation_stats_hooks.py"
    p = tmp_path / src.name
    shutil.copy(src, p)
    hook_line = next(
        i for i, ln in enumerate(p.read_text().splitlines(), 1) if "register_forward_hook(" in ln
    )
    hook = {"kind": "hook", "site": f"{p}:{hook_line}", "what": "Linear.register_forward_hook"}
    hooks_rows = {"steps": {"measured_steps": 3}, "repeats": [{**hook, "calls": 21}]}

    def compile_change(record: dict[str, Any]) -> Any:
        changes = planner.plan([finding("host-bound")], ctx(tmp_path, p, record)).changes
        return only([c for c in changes if c.codemod == "compile-model"])

    refused = compile_change(hooks_rows)
    assert refused.status == "refused", refused
    assert f"Linear.register_forward_hook is built every step at {src.name}:{hook_line}" in (
        refused.reason
    )
    # a hook registered once (fewer calls than steps) leaves the compile to the usual checks
    once = compile_change({**hooks_rows, "repeats": [{**hook, "calls": 2}]})
    assert "built every step" not in (once.reason or ""), once


MODEL = """
import torch
from torch import nn


class Encoder(nn.Module):
    def forward(self, tokens, mask=None):
        return tokens


model = Encoder()
compiled = torch.compile(model, dynamic=False)
for step in range(10):
    tokens = make_batch(step)
    out = compiled(tokens)
    out = compiled(tokens.long())
"""


def test_mark_dynamic_maps_the_guarded_argument_to_each_call(tmp_path: Path) -> None:
    p = script(tmp_path, MODEL)
    events = [
        {
            "function": "forward",
            "site": "train.py:6",
            "changed_dims": [{"tensor": "tokens", "dim": 1, "expected": 58, "actual": 28}],
        },
        {
            "function": "",
            "site": "?:0",
            "changed_dims": [{"tensor": "tokens", "dim": 1, "expected": 28, "actual": 91}],
        },
    ]
    changes = planner.plan(
        [finding("recompiles")], ctx(tmp_path, p, {"compile": {"recompile_events": events}})
    ).changes
    done = [c for c in changes if c.status == "patched"]
    assert len(done) == 1 and done[0].line == 14
    assert (
        "+    torch._dynamo.mark_dynamic(tokens, 1)  # torchdoctor: dim 1 takes sizes 58, 28, 91: one dynamic graph"
        in done[0].diff
    )
    refused = [c for c in changes if c.status == "refused"]
    assert len(refused) == 1 and "`tokens.long()` is computed inside the call" in refused[0].reason


def test_mark_dynamic_refuses_a_dimension_that_took_size_one(tmp_path: Path) -> None:
    p = script(tmp_path, MODEL)
    events = [
        {
            "function": "forward",
            "site": "train.py:6",
            "changed_dims": [{"tensor": "tokens", "dim": 0, "expected": 1, "actual": 8}],
        }
    ]
    c = only(
        planner.plan(
            [finding("recompiles")], ctx(tmp_path, p, {"compile": {"recompile_events": events}})
        ).changes
    )
    assert c.status == "refused" and "took size 1" in c.reason


def test_precision_codemods_need_a_gpu_that_has_the_tensor_cores(tmp_path: Path) -> None:
    p = script(tmp_path, "import torch\nloss = model(x)\nloss.backward()\n")
    for fid in ("fp32-on-bf16-gpu", "tf32-off"):
        c = only(planner.plan([finding(fid)], ctx(tmp_path, p)).changes)
        assert c.status == "refused"
    volta = {"gpu": {"device": {"name": "V100", "bf16_tensor_cores": False, "tf32_capable": False}}}
    c = only(planner.plan([finding("fp32-on-bf16-gpu")], ctx(tmp_path, p, volta)).changes)
    assert "fp16 with a GradScaler" in c.reason
    c = only(planner.plan([finding("fp32-on-bf16-gpu")], ctx(tmp_path, p, {"gpu": GPU})).changes)
    assert c.status == "patched" and c.precision == "bf16-mixed"


def test_two_reads_in_one_statement_are_one_change(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        """
        for step in range(9):
            print(
                loss.item(),
                acc.item(),
            )
        """,
    )
    sites = [{"site": f"{p}:3", "kind": "item"}, {"site": f"{p}:4", "kind": "item"}]
    c = only(planner.plan([finding("host-syncs-in-step", sites=sites)], ctx(tmp_path, p)).changes)
    assert c.status == "patched" and c.line == 2


def test_sync_every_n_from_the_blocked_time() -> None:
    from torchdoctor.fix.codemods.host_sync import every_n

    assert (
        every_n(FindingRef("x", evidence={"mean_step_ms": 10.0, "blocked_ms_per_step": 0.5})) == 10
    )
    assert (
        every_n(FindingRef("x", evidence={"mean_step_ms": 10.0, "blocked_ms_per_step": 3.0})) == 50
    )
    assert (
        every_n(FindingRef("x", evidence={"mean_step_ms": 10.0, "blocked_ms_per_step": 30.0}))
        == 100
    )
    assert every_n(FindingRef("x")) == 10


def test_anomaly_with_two_calls_and_no_site_is_refused(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        "import torch\ntorch.autograd.set_detect_anomaly(True)\ntorch.autograd.set_detect_anomaly(True)\n",
    )
    c = only(planner.plan([FindingRef("anomaly-detection")], ctx(tmp_path, p)).changes)
    assert c.status == "refused" and "2 candidate sites" in c.reason


def test_the_same_edit_for_two_findings_is_one_change(tmp_path: Path) -> None:
    p = script(tmp_path, "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\n")
    raw = {**LOADER_RAW, "call": {"site": f"{p}:2"}}
    fs = [
        finding("unpinned-non-blocking", dataloader=raw),
        finding("pageable-h2d-copies", dataloader=raw),
    ]
    changes = [
        c
        for c in planner.plan(fs, ctx(tmp_path, p, {"gpu": GPU})).changes
        if c.codemod == "dataloader-args"
    ]
    assert only(changes).also == ("pageable-h2d-copies",)


def test_changes_in_one_file_compose(tmp_path: Path) -> None:
    p = script(
        tmp_path,
        """
        import torch
        from torch.utils.data import DataLoader

        torch.autograd.set_detect_anomaly(True)
        loader = DataLoader(ds, batch_size=8)
        total = 0.0
        for i, (x, y) in enumerate(loader):
            loss = model(x)
            loss.backward()
            total += loss.item()
        print(total)
        """,
    )
    raw = {**LOADER_RAW, "call": {"site": f"{p}:5"}}
    fs = [
        finding("dataloader-config", dataloader=raw, suggested_num_workers=2),
        FindingRef("anomaly-detection"),
        finding("host-syncs-in-step", sites=[{"site": f"{p}:10"}]),
    ]
    plan = planner.plan(fs, ctx(tmp_path, p))
    assert [c.status for c in plan.changes] == ["patched"] * 3
    files, skipped = planner.compose(plan, plan.patched)
    assert not skipped
    text = files[str(p)]
    assert (
        "DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True, prefetch_factor=4)"
        in text
    )
    assert "set_detect_anomaly(False)" in text
    assert "total += loss.detach()" in text and "print(float(total))" in text
    compile(text, "train.py", "exec")


def test_a_codemod_that_raises_refuses_its_finding_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = script(tmp_path, "import torch\ntorch.autograd.set_detect_anomaly(True)\n")

    def boom(*_: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(CODEMODS["anomaly-off"], "plan", boom)
    monkeypatch.delenv("TORCHDOCTOR_DEBUG", raising=False)
    c = only(planner.plan([FindingRef("anomaly-detection")], ctx(tmp_path, p)).changes)
    assert c.status == "refused" and c.reason == "internal error in anomaly-off: RuntimeError: bug"


def test_site_relative_to_the_run_and_user_file_policy(tmp_path: Path) -> None:
    from torchdoctor.fix import sources

    p = script(tmp_path, "x = 1\n")
    c = ctx(tmp_path, p)
    assert c.site("train.py:1") == (str(p), 1)
    assert c.site("train.py:18 (forward)") == (str(p), 18)
    assert c.site("?:0") is None and c.site("<eval_with_key>.3:4") is None
    assert sources.is_user_file(str(p))
    assert not sources.is_user_file(torch.__file__)
    assert sources.is_library(torch.__file__)


def test_files_named_by_sites_are_searched_too(tmp_path: Path) -> None:
    p = script(tmp_path, "import helpers\nhelpers.run()\n")
    (tmp_path / "pkg").mkdir()
    lib = script(
        tmp_path / "pkg", "import torch\nopt = torch.optim.Adam(model.parameters())\n", "opt.py"
    )
    c = ctx(tmp_path, p)
    assert str(lib) not in c.files()
    c.add_sites_of(
        {"sites": [{"site": "pkg/opt.py:2"}], "other": ["not a site", torch.__file__ + ":1"]}
    )
    assert c.files() == [str(p), str(lib)]
    rows = [{"class": "Adam", "impl": "for-loop", "param_devices": ["cpu"]}]
    change = planner.plan([finding("host-bound", for_loop_optimizers=rows)], c).changes[0]
    assert change.status == "patched" and change.file == str(lib)


DECORATED = """
import torch


@torch.compile(dynamic=False)
def step(x, scale):
    return x * scale


for i in range(3):
    batch = torch.ones(2, i + 2)
    step(batch, 2.0)
    step(batch.float(), 2.0)
    step(*[batch, 2.0])
"""


def test_the_patch_and_the_printed_fix_name_the_same_calls_of_a_decorated_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dynamo records a decorated function's site at its first decorator (the code object's
    first line), not at ``def``. The codemod and the report's printed line take the calls from
    one search (``rules/call_sites.py``): both put ``mark_dynamic`` before line 11's call, on
    the caller's ``batch``; the computed ``batch.float()`` is refused by the one and left out
    by the other; a starred call names no argument."""
    from torchdoctor.rules.call_sites import guarded_calls

    p = script(tmp_path, DECORATED)
    dims = [{"tensor": "x", "dim": 1, "expected": 2, "actual": 3}]
    record = {"script": str(p), "compile": {"recompile_events": [
        {"function": "step", "site": "train.py:4", "changed_dims": dims}]}}  # fmt: skip
    changes = planner.plan([finding("recompiles")], ctx(tmp_path, p, record)).changes
    assert [(c.status, c.line) for c in changes] == [("patched", 11), ("refused", 12)]
    assert "+    torch._dynamo.mark_dynamic(batch, 1)  # torchdoctor: dim 1" in changes[0].diff
    assert "`batch.float()` is computed inside the call" in changes[1].reason
    monkeypatch.chdir(tmp_path)
    printed = guarded_calls(RunRecord.from_dict(record))
    assert printed == [{"name": "x", "dim": 1, "site": "train.py:11", "expr": "batch"}]


@pytest.mark.parametrize("source", ["events", "reasons"])
def test_mark_dynamic_marks_a_chain_from_the_argument_the_guard_names(
    tmp_path: Path, source: str
) -> None:
    """The guard names a key of a dict argument (``L['x']['ids']``, kept whole in the recorded
    event): the caller's ``batch['ids']`` is marked before the call, from the run's recompile
    events or, in a folder with the finding alone, from its guard reasons and where."""
    p = script(tmp_path, DECORATED.replace("x * scale", "x['ids'] * scale").replace(
        "batch = torch.ones(2, i + 2)", "batch = {'ids': torch.ones(2, i + 2)}"))  # fmt: skip
    reason = "0/0: tensor 'L['x']['ids']' size mismatch at index 1. expected 2, actual 3"
    dims = [{"tensor": "L['x']['ids']", "dim": 1, "expected": 2, "actual": 3}]
    events = [{"function": "step", "site": "train.py:4", "changed_dims": dims}]
    record = {"compile": {"recompile_events": events}} if source == "events" else None
    f = FindingRef("recompiles", evidence={"reasons": [reason]}, where=("train.py:4 (step)",))
    changes = planner.plan([f], ctx(tmp_path, p, record)).changes
    assert [(c.status, c.line) for c in changes] == [("patched", 11), ("refused", 12)]
    assert "+    torch._dynamo.mark_dynamic(batch['ids'], 1)  # torchdoctor: dim 1 takes " \
        "sizes 2, 3" in changes[0].diff  # fmt: skip
