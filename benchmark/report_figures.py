"""The figures of benchmark/report.py: each task's learning curves (the mean over seeds with a band of one sample
standard deviation, ddof 1), one panel per variant, written as PNGs."""

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from report_tables import REFERENCE_SCORES, reference_reached, seeds, variant_order  # noqa: E402

CURVE_POINTS = 100  # points of each learning curve on a common step grid


def panels_figure(count: int, sharey=True):
    """A figure of `count` panels of learning curves, four to a row."""
    cols = min(4, count)
    rows = -(-count // cols)
    return plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False, sharex=True, sharey=sharey)


def draw_curve(ax, group: pd.DataFrame, grid, color, label):
    """The mean of a group of seeds' learning curves (curve) with a band of one sample standard deviation (ddof 1, as
    the tables': none where fewer than two seeds have a value)."""
    curves = curve(group, grid)
    with warnings.catch_warnings():  # grid points before a seed's first episode are NaN in every seed
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = np.nanmean(curves, axis=0), np.nanstd(curves, axis=0, ddof=1)
    ax.plot(grid, mean, color=color, label=f"{label} ({seeds(curves)})")
    ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2)


def finish_panels(fig, axes, used: int, title: str, path: Path):
    """Blank the unused panels, label the axes, title the figure and write it to path."""
    for ax in axes.flat[used:]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("env steps")
    for ax in axes[:, 0]:
        ax.set_ylabel("episodic return")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # room for the title
    fig.savefig(path, dpi=90)
    plt.close(fig)


def curve(group: pd.DataFrame, grid):
    """The seeds' learning curves on a common step grid: each seed's return averaged over a trailing window of
    episodes, interpolated between its episodes' end steps; NaN before its first episode ends, and its last value
    after its last one (the return as of that step: no episode of the run ended since), so that the mean at the end
    of the grid is over all seeds, not over the one whose last episode happened to end last."""
    curves = []
    for steps, returns in zip(group["steps"], group["returns"]):
        window = max(1, min(100, len(returns) // 10))
        smoothed = pd.Series(returns).rolling(window, min_periods=1).mean().to_numpy()
        values = np.interp(grid, steps, smoothed)
        values[grid < steps[0]] = np.nan
        curves.append(values)
    return np.array(curves)


def plot_env(env_runs: pd.DataFrame, env_id: str, path: Path, peers=()):
    """One panel if there is one variant; else one panel per variant with the default run drawn in grey behind it, or
    for a peer, ours (the default) in blue beside the peer in orange."""
    variants = variant_order(env_runs["variant"].unique())
    grid = np.linspace(0, max(s[-1] for s in env_runs["steps"]), CURVE_POINTS)
    panels = variants if len(variants) == 1 or "default" not in variants else [v for v in variants if v != "default"]
    fig, axes = panels_figure(len(panels))
    for ax, variant in zip(axes.flat, panels):
        behind = "tab:blue" if variant in peers else "grey"
        shown = [("default", behind)] if variant != "default" and "default" in variants else []
        for name, color in shown + [(variant, "tab:orange" if variant in peers else "tab:blue")]:
            label = "ours (default)" if name == "default" and variant in peers else name
            draw_curve(ax, env_runs[env_runs["variant"] == name], grid, color, label)
        if reference_reached(env_id, grid[-1]):
            ax.axhline(REFERENCE_SCORES[env_id][0], color="black", linestyle=":", linewidth=1, label="reference")
        ax.set_title(variant if len(panels) > 1 else env_id, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    finish_panels(fig, axes, len(panels), f"{env_id}: mean ± sample std over seeds", path)
