"""PNG figures of a benchmark run, after the figures of the thesis: runtime against grid size
per variant, speed-up over the naive variant, peak device memory, and GPU time per pass."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MIB = 1 << 20
PEER_STYLE = {"reference": "tab:gray", "pyvista": "tab:olive", "trimesh": "tab:brown"}


def write_plots(doc: dict, directory: str | Path) -> list[Path]:
    """Write the figures that the run has data for into `directory`; returns their paths.
    Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    if not rows:
        return []
    title = f"{doc['device']['name']}, output {doc['settings']['output']}, {doc['date'][:10]}"
    written = [
        _runtime(rows, doc.get("peers", []), title, directory / "runtime.png"),
        _speedup(rows, title, directory / "speedup.png"),
        _memory(rows, title, directory / "memory.png"),
        _passes(rows, title, directory / "passes.png"),
    ]
    return [path for path in written if path is not None]


def _models(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in rows))


def _series(rows: list[dict], model: str) -> dict[str, list[dict]]:
    """Rows of one model by "variant/sort", each sorted by grid."""
    series: dict[str, list[dict]] = {}
    for r in sorted((r for r in rows if r["model"] == model), key=lambda r: r["grid"]):
        series.setdefault(f"{r['variant']}/{r['sort']}", []).append(r)
    return series


def _figure(count: int, title: str) -> tuple[Figure, list[Axes]]:
    import matplotlib.pyplot as plt

    columns = min(count, 3)
    lines = -(-count // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.8 * lines), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    figure.suptitle(title, fontsize=9)
    return figure, list(axes.flat)


def _log_y(axis: Axes) -> None:
    """A log y axis labelled in plain numbers (1000, 2000), not 10^3 and 2x10^3."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    axis.yaxis.set_major_formatter(plain)
    low, high = axis.get_ylim()
    if high / low < 10:  # less than a decade: the minor ticks are the only labels
        axis.yaxis.set_minor_formatter(plain)
        axis.tick_params(axis="y", which="minor", labelsize=7)
    else:
        axis.yaxis.set_minor_formatter(NullFormatter())


def _grid_axis(axis: Axes, grids: list[int]) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(grids, [str(g) for g in grids])
    axis.set_xlabel("grid N (N³ voxels)")
    axis.grid(True, which="both", alpha=0.3)


def _legend(figure: Figure, axes: list[Axes]) -> None:
    """One legend for all panels, right of them, so that it hides no data."""
    entries: dict[str, Artist] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    figure.legend(
        list(entries.values()),
        list(entries),
        loc="upper left",
        fontsize=7,
        bbox_to_anchor=(1.0, 0.92),
    )


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path


def _runtime(rows: list[dict], peers: list[dict], title: str, path: Path) -> Path:
    """End-to-end API time against grid size, one line per variant; peers dashed."""
    models = _models(rows)
    figure, axes = _figure(len(models), "end-to-end API time\n" + title)
    for axis, model in zip(axes, models):
        for label, series in _series(rows, model).items():
            axis.plot(
                [r["grid"] for r in series],
                [r["wall_ms"]["median"] for r in series],
                marker="o",
                label=label,
            )
        for peer, colour in PEER_STYLE.items():
            points = sorted(
                (p["grid"], 1e3 * p["seconds"])
                for p in peers
                if p["model"] == model and p["peer"] == peer and p["status"] == "ok"
            )
            if points:
                axis.plot(*zip(*points), linestyle="--", marker="s", color=colour, label=peer)
        _log_y(axis)
        axis.set_ylabel("ms (median; peers: min)")
        axis.set_title(model)
        _grid_axis(axis, sorted({r["grid"] for r in rows if r["model"] == model}))
    _legend(figure, axes)
    return _save(figure, path)


def _speedup(rows: list[dict], title: str, path: Path) -> Path | None:
    """GPU compute time of naive over that of each variant, with the same sort and grid."""
    naive = {
        (r["model"], r["grid"], r["sort"]): r["gpu_ms_compute"]
        for r in rows
        if r["variant"] == "naive"
    }
    if not naive or all(r["variant"] == "naive" for r in rows):
        return None
    models = _models(rows)
    figure, axes = _figure(len(models), "GPU speed-up over naive\n" + title)
    for axis, model in zip(axes, models):
        for label, series in _series(rows, model).items():
            if label.startswith("naive/"):
                continue
            points = [
                (r["grid"], naive[model, r["grid"], r["sort"]] / r["gpu_ms_compute"])
                for r in series
                if (model, r["grid"], r["sort"]) in naive
            ]
            if points:
                axis.plot(*zip(*points), marker="o", label=label)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_ylabel("× faster than naive (GPU compute)")
        axis.set_title(model)
        _grid_axis(axis, sorted({r["grid"] for r in rows if r["model"] == model}))
    _legend(figure, axes)
    return _save(figure, path)


def _memory(rows: list[dict], title: str, path: Path) -> Path:
    """Peak device memory (every buffer held at once) against grid size."""
    models = _models(rows)
    figure, axes = _figure(len(models), "peak device memory\n" + title)
    for axis, model in zip(axes, models):
        for label, series in _series(rows, model).items():
            axis.plot(
                [r["grid"] for r in series],
                [r["memory"]["device_peak_bytes"] / MIB for r in series],
                marker="o",
                label=label,
            )
        low, high = axis.get_ylim()
        if low > 0 and high / low > 20:  # a log axis only where it is needed to read it
            _log_y(axis)
        axis.set_ylabel("MiB")
        axis.set_title(model)
        _grid_axis(axis, sorted({r["grid"] for r in rows if r["model"] == model}))
    _legend(figure, axes)
    return _save(figure, path)


def _passes(rows: list[dict], title: str, path: Path) -> Path:
    """Median GPU time of each pass, stacked, one bar per grid and variant."""
    import matplotlib.pyplot as plt

    names: list[str] = []
    for r in rows:
        names += [name for name, ms in r["gpu_ms"].items() if ms and name not in names]
    from matplotlib.colors import ListedColormap

    colormap = plt.get_cmap("tab20")
    assert isinstance(colormap, ListedColormap)  # a qualitative map: a list of colours
    colours = cast(Sequence[Any], colormap.colors)  # matplotlib types it as any array-like
    models = _models(rows)
    figure, axes = _figure(len(models), "GPU time per pass (median)\n" + title)
    for axis, model in zip(axes, models):
        bars = sorted((r for r in rows if r["model"] == model), key=lambda r: r["grid"])
        bottom = [0.0] * len(bars)
        for index, name in enumerate(names):
            heights = [r["gpu_ms"].get(name, 0.0) for r in bars]
            axis.bar(
                range(len(bars)),
                heights,
                bottom=bottom,
                label=name,
                color=colours[index % len(colours)],
            )
            bottom = [b + h for b, h in zip(bottom, heights)]
        axis.set_xticks(
            range(len(bars)),
            [f"{r['grid']} {r['variant']}/{r['sort']}" for r in bars],
            rotation=60,
            ha="right",
            fontsize=7,
        )
        axis.set_ylabel("GPU ms")
        axis.set_title(model)
        axis.grid(True, axis="y", alpha=0.3)
    _legend(figure, axes[:1])
    return _save(figure, path)
