"""torchdoctor never blames its own code: call sites, graph breaks and recompile sites that
point into this package are removed from the record before any rule sees them, and counted
under ``own_frames`` so that a test (or a bug report) can see that it happened.

Plain data only (no torch), so it runs on a finished record.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.code_paths import code_paths


def is_ours(site: str | None) -> bool:
    """True for a ``file:line`` (or a bare file name) inside torchdoctor's package."""
    if not site:
        return False
    path = site.rsplit(":", 1)[0] if site.rsplit(":", 1)[-1].isdigit() else site
    path = path.split(" (", 1)[0]
    if not path.endswith(".py"):  # an operator name or a generated frame, not a file of ours
        return False
    return code_paths().label(path) == "torchdoctor"


def _keep(rows: list[dict[str, Any]], key: str, dropped: list[str]) -> list[dict[str, Any]]:
    kept = []
    for row in rows:
        if is_ours(row.get(key)):
            dropped.append(str(row.get(key)))
        else:
            kept.append(row)
    return kept


# (section, list, key of the site in each row)
_SITE_LISTS = (
    ("compile", "graph_breaks", "site"),
    ("compile", "recompile_events", "site"),
    ("compile", "recompile_limit_hits", "site"),
    ("syncs", "host_syncs", "site"),
    ("syncs", "unpinned_non_blocking", "site"),
    ("syncs", "sync_debug", "site"),
)


def scrub(record: dict[str, Any]) -> dict[str, Any]:
    """Remove rows whose site is torchdoctor's own from ``record`` (in place); returns it.

    ``record["own_frames"]`` lists what was removed, by section; empty when nothing was.
    """
    removed: dict[str, list[str]] = {}
    for section, name, key in _SITE_LISTS:
        part = record.get(section) or {}
        rows = part.get(name)
        if not rows:
            continue
        dropped: list[str] = []
        part[name] = _keep(rows, key, dropped)
        if dropped:
            removed[f"{section}.{name}"] = dropped[:20]
    for loader in (record.get("config") or {}).get("dataloaders") or []:
        call = loader.get("call") or {}
        if is_ours(call.get("site")):
            removed.setdefault("config.dataloaders", []).append(str(call["site"]))
            loader.pop("call", None)
    record["own_frames"] = removed
    return record
