"""Figures of the study report, rendered server-side with matplotlib's Agg backend as PNG bytes.
Each takes a ``ScoreRun.results`` dict and returns ``None`` when the run has nothing to plot."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CATEGORIES = [("useful", "Useful", "#1b9e77"), ("unsure", "Unsure", "#7570b3"), ("not_useful", "Not useful", "#d95f02")]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _grouped_shares(shares: dict, title: str) -> bytes | None:
    if not shares:
        return None
    sources = list(shares)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(sources) + 2), 3.4))
    width = 0.8 / len(CATEGORIES)
    for j, (key, label, color) in enumerate(CATEGORIES):
        xs = [i + (j - 1) * width for i in range(len(sources))]
        vals = [shares[s][key] or 0.0 for s in sources]
        lo = [max(0.0, v - (shares[s][f"{key}_ci"][0] or v)) for s, v in zip(sources, vals, strict=True)]
        hi = [max(0.0, (shares[s][f"{key}_ci"][1] or v) - v) for s, v in zip(sources, vals, strict=True)]
        ax.bar(xs, vals, width, yerr=[lo, hi], capsize=3, label=label, color=color)
    ax.set_xticks(range(len(sources)), [f"{s}\n(n={shares[s]['n']})" for s in sources])
    ax.set_ylabel("share of rationales")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(frameon=False, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    return _png(fig)


def utility_shares_png(results: dict) -> bytes | None:
    """Utility shares per source with bootstrap 95% intervals (Table 3 as a figure)."""
    return _grouped_shares(results.get("utility_shares") or {}, "Human utility of rationales (95% bootstrap CI)")


def gen_u_vs_utility_png(results: dict) -> bytes | None:
    """Gen-U shares next to human utility shares, per source."""
    human = results.get("utility_shares") or {}
    genu = results.get("gen_u_shares") or {}
    sources = [s for s in human if s in genu]
    if not sources:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(max(7, 2.4 * len(sources) + 2), 3.4), sharey=True)
    for ax, (name, shares) in zip(axes, [("Human utility", human), ("Gen-U", genu)], strict=True):
        bottom = [0.0] * len(sources)
        for key, label, color in CATEGORIES:
            vals = [shares[s][key] or 0.0 for s in sources]
            ax.bar(sources, vals, bottom=bottom, label=label, color=color)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_title(name)
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("share")
    u = results.get("theils_u_utility_given_gen_u") or {}
    if u.get("all") is not None:
        fig.suptitle(f"Theil's U(utility | Gen-U) = {u['all']:.3f}")
    axes[1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def generalization_png(results: dict) -> bytes | None:
    """Figure 4: accuracy after minus before on generalization questions, by question type and by
    the original rationale's utility, with bootstrap 95% intervals."""
    gen = results.get("generalization") or {}
    panels = [("by question type", gen.get("by_type") or {}), ("by original utility", gen.get("by_utility") or {})]
    panels = [(t, d) for t, d in panels if d]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, data) in zip(axes[0], panels, strict=True):
        keys = list(data)
        vals = [data[k]["accuracy_delta"] for k in keys]
        lo = [v - data[k]["accuracy_delta_ci"][0] for k, v in zip(keys, vals, strict=True)]
        hi = [data[k]["accuracy_delta_ci"][1] - v for k, v in zip(keys, vals, strict=True)]
        ax.bar(keys, vals, yerr=[lo, hi], capsize=3, color="#4c72b0")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(title)
        ax.set_xticks(range(len(keys)), [f"{k}\n(n={data[k]['n']})" for k in keys])
    axes[0][0].set_ylabel("accuracy after - before")
    fig.suptitle("Generalization: change in accuracy with the rationale")
    return _png(fig)


PLOTS = {
    "utility_shares": utility_shares_png,
    "gen_u_vs_utility": gen_u_vs_utility_png,
    "generalization": generalization_png,
}
