"""The benchmark's results as JSON and as markdown tables (docs/benchmarks.md explains them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

MIB = 1 << 20


def write_json(doc: dict, path: str | Path) -> None:
    """The whole results document; numpy scalars and paths become plain JSON values."""
    Path(path).write_text(json.dumps(doc, indent=2, default=_plain) + "\n")


def _plain(value: object) -> int | float | list[Any] | str:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (np.ndarray, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def markdown(doc: dict) -> str:
    """Every table of the run, headed by where and how it was measured."""
    parts = [header(doc), "", runs_table(doc["rows"]), "", passes_table(doc["rows"])]
    if doc.get("peers"):
        parts += ["", peers_table(doc["peers"])]
    if doc.get("cli"):
        parts += ["", cli_table(doc["cli"])]
    skipped = [r for r in doc["rows"] if r["status"] != "ok"]
    if skipped:
        parts += ["", "Skipped:", ""]
        parts += [
            f"- {r['model']} {r['grid']}³ {r['variant']} {r['sort']}: {r['reason']}"
            for r in skipped
        ]
    return "\n".join(parts) + "\n"


def header(doc: dict) -> str:
    device, settings = doc["device"], doc["settings"]
    commit = doc.get("commit") or "unknown"
    lines = [
        f"- device: {device['name']} (driver: {device.get('driver') or 'unknown'})",
        f"- host: {doc['host']}",
        f"- date: {doc['date']}; commit: {commit}",
        f"- output: {settings['output']}; {settings['repeat']} timed call(s) after a warm-up",
    ]
    if settings.get("bandwidth_gbps"):
        lines.append(f"- bandwidth for the fractions: {settings['bandwidth_gbps']:g} GB/s")
    return "\n".join(lines)


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> str:
    rule = ["---:" if i in right else "---" for i in range(len(head))]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [head, rule, *rows])


def runs_table(rows: list[dict]) -> str:
    """One line per configuration: end-to-end time, GPU time, workload, memory."""
    ok = [r for r in rows if r["status"] == "ok"]
    with_bandwidth = any(r.get("bandwidth_fraction") for r in ok)
    head = [
        "model",
        "triangles",
        "grid",
        "variant",
        "sort",
        "API ms (median, min–max)",
        "from arrays ms",
        "GPU ms",
        "compute ms",
        "pairs",
        "tiles",
        "peak device MiB",
    ]
    if with_bandwidth:
        head.append("bandwidth %")
    lines = []
    for r in ok:
        wall, counts = r["wall_ms"], r["counts"]
        cells = [
            r["model"],
            f"{r['triangles']:,}",
            str(r["grid"]),
            r["variant"],
            r["sort"],
            f"{wall['median']:.1f} ({wall['min']:.1f}–{wall['max']:.1f})",
            "" if r.get("from_arrays_ms") is None else f"{r['from_arrays_ms']:.1f}",
            f"{r['gpu_ms_total']:.2f}",
            f"{r['gpu_ms_compute']:.2f}",
            f"{counts.get('pairs', 0):,}",
            f"{counts.get('tiles', 0):,}",
            f"{r['memory']['device_peak_bytes'] / MIB:.1f}",
        ]
        if with_bandwidth:
            total = r.get("bandwidth_fraction", {}).get("total")
            cells.append("" if total is None else f"{100 * total:.1f}")
        lines.append(cells)
    return _table(head, lines, set(range(5, len(head))) | {1, 2})


def passes_table(rows: list[dict]) -> str:
    """Median GPU milliseconds of every pass that took any time in some configuration."""
    ok = [r for r in rows if r["status"] == "ok"]
    names: list[str] = []
    for r in ok:
        names += [name for name, ms in r["gpu_ms"].items() if ms and name not in names]
    head = ["model", "grid", "variant", "sort", *names]
    lines = [
        [
            r["model"],
            str(r["grid"]),
            r["variant"],
            r["sort"],
            *(f"{r['gpu_ms'].get(name, 0.0):.2f}" for name in names),
        ]
        for r in ok
    ]
    return _table(head, lines, set(range(4, len(head))) | {1})


def peers_table(peers: list[dict]) -> str:
    """Each peer against our end-to-end time in the same run; below 1 we are faster."""
    head = [
        "model",
        "grid",
        "peer",
        "peer ms (min)",
        "ours ms",
        "ours ÷ peer",
        "extra voxels",
        "missing voxels",
        "note",
    ]
    lines = []
    for p in peers:
        seconds, ratio = p.get("seconds"), p.get("ratio")
        done = p["status"] == "ok"
        lines.append(
            [
                p["model"],
                str(p["grid"]),
                p["peer"],
                "" if seconds is None else f"{1e3 * seconds:,.1f}",
                "" if p.get("ours_ms") is None else f"{p['ours_ms']:,.1f}",
                "" if ratio is None else f"{ratio:.2f}",
                f"{p['extra_voxels']:,}" if done else "",
                f"{p['missing_voxels']:,}" if done else "",
                "" if done else f"{p['status']}: {p.get('reason', '')}",
            ]
        )
    return _table(head, lines, {1, 3, 4, 5, 6, 7})


def cli_table(cli: list[dict]) -> str:
    """Wall time of one `python -m voxelizer.cli MODEL --grid N` process per grid."""
    head = ["CLI model", "grid", "process wall s", "reported s", "note"]
    lines = [
        [
            c["model"],
            str(c["grid"]),
            f"{c['wall_s']:.2f}" if c.get("wall_s") is not None else "",
            f"{c['reported_s']:.2f}" if c.get("reported_s") is not None else "",
            "" if c["status"] == "ok" else f"{c['status']}: {c.get('reason', '')}",
        ]
        for c in cli
    ]
    return _table(head, lines, {1, 2, 3})
