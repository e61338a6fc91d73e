"""``fix --html``: one self-contained page, the patch hunk by hunk, each with the finding it
answers, the saving the finding predicted and the speed-up measured.

Same promises as the report's page (``report/html.py``): no request leaves the page (its
Content-Security-Policy allows nothing from outside), every string is escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from torchdoctor.fix import diff
from torchdoctor.fix.model import STATUS_WORDS, Change
from torchdoctor.fix.planner import compose
from torchdoctor.fix.render import FixResult, fidelity_text, measured_text, predicted_text
from torchdoctor.fix.sources import relative
from torchdoctor.report.html import CSP
from torchdoctor.report.html_svg import esc

_HUNK = re.compile(r"^@@ -(?P<a>\d+)(?:,(?P<b>\d+))? \+\d+(?:,\d+)? @@")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1d232b}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #dde;padding:.3rem .5rem;
text-align:left;vertical-align:top}th{background:#f3f4f7}
.hunk{border:1px solid #ccd;border-radius:6px;margin:1rem 0;overflow:hidden}
.hunk header{background:#f3f4f7;padding:.4rem .7rem}.hunk header p{margin:.15rem 0}
pre{margin:0;padding:.5rem .7rem;overflow-x:auto;font:12.5px/1.4 ui-monospace,monospace}
.add{background:#e6f6e9;display:block}.del{background:#fbe9e9;display:block}
.meta{color:#5a6270}.status-patched,.status-switch{color:#17752f}.status-refused,.status-rejected,
.status-failed{color:#a12a2a}.status-no-gain,.status-already{color:#6a5a10}
"""


@dataclass(frozen=True)
class Hunk:
    """One hunk of the patch: its file, its lines, and the changes that wrote it."""

    file: str
    text: str
    changes: tuple[Change, ...]


def hunks(result: FixResult) -> list[Hunk]:
    """The patch's hunks, each with the kept changes whose edit lies inside it."""
    plan = result.plan
    touched: dict[str, list[tuple[int, int]]] = {}
    for c in result.kept:
        files, _ = compose(plan, [c])
        if c.file in files:
            touched[c.id] = diff.changed_lines(plan.originals[c.file], files[c.file])
    out: list[Hunk] = []
    files, _ = compose(plan, result.kept)
    for path in sorted(files):
        text = diff.unified(path, plan.originals[path], files[path], plan.cwd)
        for block in re.split(r"(?m)^(?=@@ )", text)[1:]:
            m = _HUNK.match(block)
            if m is None:
                continue
            a = int(m.group("a"))
            b = int(m.group("b") or 1)
            lo, hi = a, a + max(b, 1) - 1
            owners = tuple(
                c
                for c in result.kept
                if c.file == path and any(s <= hi and e >= lo for s, e in touched.get(c.id, []))
            )
            out.append(Hunk(path, block, owners))
    return out


def _code(block: str) -> str:
    """The hunk in a <pre>, added and removed lines on a coloured band. Each line keeps its own
    newline inside its element (a block element followed by a newline would draw an empty line
    under every coloured one); copied, the text is the hunk as the patch holds it."""
    rows = []
    for line in block.splitlines():
        cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        rows.append(f'<span class="{cls}">{esc(line)}\n</span>' if cls else esc(line) + "\n")
    return "<pre>" + "".join(rows) + "</pre>"


def _hunk(h: Hunk, cwd: str) -> str:
    heads = (
        "".join(
            f"<p><b>{esc(c.id)}</b> {esc(c.finding.id)} &rarr; {esc(c.codemod)}: {esc(c.summary)}</p>"
            f'<p class="meta">predicted {esc(predicted_text(c))}; {esc(_measured(c))}'
            + (f"; {esc(fidelity_text(c.fidelity))}" if c.fidelity else "")
            + "</p>"
            for c in h.changes
        )
        or '<p class="meta">(context of several changes)</p>'
    )
    return f'<section class="hunk"><header><p><b>{esc(relative(h.file, cwd))}</b></p>{heads}</header>{_code(h.text)}</section>'


def _measured(c: Change) -> str:
    if c.measured is None:
        return "not measured (fix --prove measures it)"
    return f"measured {measured_text(c.measured)}"


def _table(result: FixResult) -> str:
    cwd = result.plan.cwd
    rows = []
    for c in result.plan.changes:
        where = f"{relative(c.file, cwd)}:{c.line}" if c.file and c.line else ""
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{x}</td>"
                for x in (
                    esc(c.id),
                    esc(c.finding.id),
                    esc(c.codemod),
                    esc(where),
                    f'<span class="status-{esc(c.status)}">{esc(STATUS_WORDS[c.status])}</span>',
                    esc(predicted_text(c) if c.target or c.switch else ""),
                    esc(measured_text(c.measured) if c.measured else ""),
                    esc(c.reason or c.summary),
                )
            )
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "",
            "finding",
            "codemod",
            "where",
            "status",
            "predicted",
            "measured",
            "why / what",
        )
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render_page(result: FixResult) -> str:
    """The whole page as a string."""
    cwd = result.plan.cwd
    name = relative(result.script, cwd) if result.script else "the run"
    hs = hunks(result)
    p = result.proof
    together = (
        f"<p>All together ({esc(', '.join(p.together_ids))}): {esc(measured_text(p.together))}; "
        f"{esc(fidelity_text(p.together_fidelity))}</p>"
        if p is not None and p.together is not None
        else ""
    )
    body = "".join(_hunk(h, cwd) for h in hs) or "<p>The patch is empty.</p>"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            f"<title>torchdoctor fix: {esc(name)}</title><style>{CSS}</style></head><body>",
            f"<h1>torchdoctor fix: {esc(name)}</h1>",
            f'<p class="meta">run folder {esc(result.run_folder or "")}</p>',
            "<h2>Changes</h2>",
            _table(result),
            together,
            "<h2>The patch</h2>",
            body,
            '<footer class="meta">generated by torchdoctor; this file needs no network.</footer>',
            "</body></html>",
        ]
    )


def write_page(result: FixResult, path: str) -> Path:
    from torchdoctor.inputs import write_output

    return write_output(path, render_page(result), "HTML page")
