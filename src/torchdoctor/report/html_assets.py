"""The page's inline style sheet and script (no CDN, no web fonts: the page opens offline).

The script only ever sets ``textContent`` and attributes, never ``innerHTML``, so names from a
trace stay text. It draws the timeline from a JSON block into SVG and handles zoom and pan by
changing the SVG's ``viewBox`` (rectangles are created once; zooming costs no re-layout).
"""

CSS = """
:root { --fg:#1d2330; --muted:#5d6678; --line:#d9dde5; --bg:#fff; --card:#f6f7f9; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); margin: 0 auto; padding: 16px 20px 40px; max-width: 1240px; }
h1 { font-size: 22px; margin: 4px 0 8px; } h2 { font-size: 17px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.verdict { font-size: 16px; font-weight: 600; background: var(--card); padding: 10px 14px;
  border-left: 4px solid #3b7dd8; }
.headline { margin: 6px 0; color: var(--muted); white-space: pre-wrap; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.finding { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; margin: 10px 0;
  break-inside: avoid; }
.finding h3 { margin: 0 0 4px; font-size: 15px; }
.sev { display: inline-block; font-size: 11px; text-transform: uppercase; padding: 1px 6px;
  border-radius: 3px; color: #fff; margin-right: 6px; vertical-align: 2px; }
.sev-critical { background: #c0392b; } .sev-warning { background: #d68910; }
.sev-info { background: #7f8c8d; }
.saving { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 6px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: top; overflow-wrap: anywhere; }
th, td:not(:first-child) { white-space: nowrap; }
td:first-child:not(.num) { overflow-wrap: anywhere; min-width: 12em; }
td.wrap { white-space: normal; min-width: 7em; }
table.evidence td { white-space: normal; overflow-wrap: anywhere; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
/* headers wrap at their spaces when the table would be wider than the page */
th, th.num { white-space: normal; overflow-wrap: normal; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
tr.pick td { background: #eaf5ea; font-weight: 600; }
pre { background: #1d2330; color: #e8ecf3; padding: 10px 12px; border-radius: 4px;
  overflow-x: auto; margin: 6px 0; white-space: pre-wrap; }
.fix { position: relative; }
button { font: inherit; font-size: 12px; padding: 2px 8px; cursor: pointer; }
.fix button.copy { position: absolute; top: 6px; right: 6px; }
/* the copy button never covers the end of a line: lines wrap (long tokens too) short of it */
.fix pre { padding-right: 72px; overflow-wrap: anywhere; }
svg text { font-size: 12px; fill: var(--fg); }
svg .axis { stroke: #888; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 4px 0 10px; font-size: 12px; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px;
  vertical-align: -1px; border-radius: 2px; }
.timeline-wrap { display: grid; grid-template-columns: 190px 1fr; border: 1px solid var(--line); }
.timeline-labels div { height: 24px; line-height: 24px; font-size: 12px; padding-right: 6px;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; text-align: right; }
#timeline { width: 100%; display: block; cursor: grab; touch-action: none; }
.axis-labels { display: flex; justify-content: space-between; margin-left: 190px;
  font-size: 11px; color: var(--muted); }
.controls { margin: 6px 0; display: flex; gap: 6px; align-items: center; flex-wrap: wrap; }
.controls span { color: var(--muted); font-size: 12px; }
.notes li { color: var(--muted); }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; }
@media (max-width: 800px) { .timeline-wrap { grid-template-columns: 110px 1fr; }
  .axis-labels { margin-left: 110px; } }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  button, .controls { display: none !important; }
  h2 { break-after: avoid; } .finding, table, svg { break-inside: avoid; }
  pre { background: #f3f3f3; color: #000; border: 1px solid #ccc; }
  a { color: inherit; }
}
"""

JS = r"""
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  function data(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  // Copy buttons: the code sits in the <pre> next to the button.
  document.querySelectorAll("button.copy").forEach(function (b) {
    b.addEventListener("click", function () {
      const text = b.parentElement.querySelector("code").textContent;
      const done = function () { b.textContent = "copied"; };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { b.textContent = "select and copy"; });
      } else { b.textContent = "select and copy"; }
    });
  });
  // Sortable tables: numbers sort as numbers (data-v), text as text.
  document.querySelectorAll("table.sortable").forEach(function (t) {
    t.querySelectorAll("th").forEach(function (th, col) {
      th.addEventListener("click", function () {
        const asc = th.getAttribute("aria-sort") !== "ascending";
        t.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const body = t.tBodies[0];
        const rows = Array.from(body.rows);
        const key = function (r) {
          const c = r.cells[col]; const v = c.getAttribute("data-v");
          return v !== null ? parseFloat(v) : c.textContent.toLowerCase();
        };
        rows.sort(function (a, b) {
          const x = key(a), y = key(b);
          const r = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
          return asc ? r : -r;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  // Timeline.
  const tl = data("timeline-data");
  const colors = data("colors") || {};
  const svg = document.getElementById("timeline");
  if (!tl || !svg) return;
  const laneH = 24, axisH = 22, W = tl.step_ms * 1000;
  const H = tl.lanes.length * laneH + axisH;
  const view = { x: 0, w: W };
  svg.setAttribute("height", String(H));
  svg.setAttribute("preserveAspectRatio", "none");
  const body = document.createElementNS(NS, "g");
  svg.appendChild(body);
  tl.lanes.forEach(function (lane, i) {
    const y = i * laneH + 3;
    const bg = document.createElementNS(NS, "rect");
    bg.setAttribute("x", "0"); bg.setAttribute("y", String(i * laneH));
    bg.setAttribute("width", String(W)); bg.setAttribute("height", String(laneH));
    bg.setAttribute("fill", i % 2 ? "#fafbfc" : "#f1f3f6");
    body.appendChild(bg);
    for (let k = 0; k < lane.s.length; k++) {
      const r = document.createElementNS(NS, "rect");
      r.setAttribute("x", String(lane.s[k])); r.setAttribute("y", String(y));
      r.setAttribute("width", String(Math.max(lane.d[k], 0))); r.setAttribute("height", String(laneH - 6));
      r.setAttribute("fill", colors[lane.c[k]] || "#999");
      r.setAttribute("class", "ev");
      const title = document.createElementNS(NS, "title");
      title.textContent = tl.names[lane.n[k]] + " \u2014 " + (lane.d[k] / 1000).toFixed(3) + " ms at +" + (lane.s[k] / 1000).toFixed(3) + " ms";
      r.appendChild(title);
      body.appendChild(r);
    }
  });
  const axis = document.getElementById("timeline-axis");
  const status = document.getElementById("timeline-view");
  function draw() {
    svg.setAttribute("viewBox", view.x + " 0 " + view.w + " " + H);
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    for (let i = 0; i <= 5; i++) {
      const s = document.createElement("span");
      s.textContent = ((view.x + view.w * i / 5) / 1000).toFixed(3) + " ms";
      axis.appendChild(s);
    }
    status.textContent = "showing " + (view.w / 1000).toFixed(3) + " of " + tl.step_ms.toFixed(3) + " ms";
  }
  function zoom(factor, centre) {
    const c = centre === undefined ? view.x + view.w / 2 : centre;
    const w = Math.min(W, Math.max(W / 4000, view.w * factor));
    view.x = Math.min(Math.max(0, c - (c - view.x) * w / view.w), W - w);
    view.w = w; draw();
  }
  function pan(dx) { view.x = Math.min(Math.max(0, view.x + dx), W - view.w); draw(); }
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("zoom-reset").addEventListener("click", function () { view.x = 0; view.w = W; draw(); });
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    const box = svg.getBoundingClientRect();
    const at = view.x + (e.clientX - box.left) / box.width * view.w;
    zoom(e.deltaY < 0 ? 0.8 : 1.25, at);
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", function (e) { drag = e.clientX; svg.setPointerCapture(e.pointerId); });
  svg.addEventListener("pointermove", function (e) {
    if (drag === null) return;
    const box = svg.getBoundingClientRect();
    pan((drag - e.clientX) / box.width * view.w); drag = e.clientX;
  });
  svg.addEventListener("pointerup", function () { drag = null; });
  draw();
})();
"""
