"""Figures of the study report, rendered server-side with matplotlib's Agg backend as PNG or SVG
bytes. Each takes a ``ScoreRun.results`` dict and a format and returns ``None`` when the run has
nothing to plot; ``available(results)`` names those a run can draw without drawing them."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "rationale-lab"  # the same results give the same SVG
matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: editable in a paper's figure
# Labels are text, never math: a source named "$\\foo$" (any imported file can name one) is drawn as
# it is written instead of going to mathtext, which fails on it (a 500 on the report's figures and zip).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CATEGORIES = [("useful", "Useful", "#1b9e77"), ("unsure", "Unsure", "#7570b3"), ("not_useful", "Not useful", "#d95f02")]


FORMATS = {"png": "image/png", "svg": "image/svg+xml"}


def _save(fig: Figure, fmt: str) -> bytes:
    if fmt not in FORMATS:
        raise ValueError(f"figure format {fmt!r}: one of {', '.join(FORMATS)}")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    return buf.getvalue()


def _grouped_shares(shares: dict, title: str, fmt: str) -> bytes | None:
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
    return _save(fig, fmt)


def utility_shares_figure(results: dict, fmt: str = "png") -> bytes | None:
    """Utility shares per source (SPEC section 2) with bootstrap 95% intervals (our choice; SPEC asks
    for none)."""
    return _grouped_shares(results.get("utility_shares") or {}, "Human utility of rationales (95% bootstrap CI)", fmt)


def _gen_u_sources(results: dict) -> list[str]:
    genu = results.get("gen_u_shares") or {}
    return [s for s in (results.get("utility_shares") or {}) if s in genu]


# What each panel's "all" bar pools where the two differ (``gen_u_vs_utility_figure``).
ALL_HUMAN, ALL_GEN_U = "all sources", "all with Gen-U"


def gen_u_vs_utility_figure(results: dict, fmt: str = "png") -> bytes | None:
    """Gen-U shares next to human utility shares, per source, each bar named with its units (n).
    Where the human "all" pools sources that have no Gen-U (a gold source, one no Gen-U job ran for),
    the two "all" bars are named by what each pools. A U of 1 that says nothing (utility does not
    vary: ``theils_u_degenerate``) is titled so."""
    human = results.get("utility_shares") or {}
    genu = results.get("gen_u_shares") or {}
    sources = _gen_u_sources(results)
    if not sources:
        return None
    pools_differ = "all" in sources and set(human) != set(genu)
    fig, axes = plt.subplots(1, 2, figsize=(max(7, 2.4 * len(sources) + 2), 3.4), sharey=True)
    for ax, (name, shares, pooled) in zip(axes, [("Human utility", human, ALL_HUMAN), ("Gen-U", genu, ALL_GEN_U)],
                                          strict=True):
        bottom = [0.0] * len(sources)
        for key, label, color in CATEGORIES:
            vals = [shares[s][key] or 0.0 for s in sources]
            ax.bar(range(len(sources)), vals, bottom=bottom, label=label, color=color)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xticks(range(len(sources)), [f"{pooled if s == 'all' and pools_differ else s}\n(n={shares[s].get('n')})"
                                            for s in sources])
        ax.set_title(name)
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("share")
    u = results.get("theils_u_utility_given_gen_u") or {}
    if u.get("all") is not None:
        rule = ((results.get("gen_u") or {}).get("tie_rules") or {}).get("default")
        degenerate = ((results.get("theils_u_degenerate") or {}).get("theils_u_utility_given_gen_u") or {}).get("all")
        fig.suptitle(f"Theil's U(utility | Gen-U) = {u['all']:.3f}"
                     + (" (utility does not vary: U says nothing)" if degenerate else "")
                     + (f" (Gen-U ties: {rule})" if rule else ""))
    axes[1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, fmt)


def _generalization_panels(results: dict) -> list[tuple[str, dict]]:
    gen = results.get("generalization") or {}
    panels = [("by question type", gen.get("by_type") or {}), ("by original utility", gen.get("by_utility") or {}),
              ("by source", gen.get("by_source") or {})]
    return [(t, d) for t, d in panels if d]


UTILITY_KEYS = ["useful", "unsure", "not_useful", "unknown"]


def _keys(title: str, data: dict) -> list[str]:
    if title == "by original utility":
        return sorted(data, key=lambda k: (UTILITY_KEYS.index(k) if k in UTILITY_KEYS else len(UTILITY_KEYS), k))
    return sorted(data)


def generalization_figure(results: dict, fmt: str = "png", *, gold: tuple[str, ...] = ()) -> bytes | None:
    """Figure 4: accuracy after minus before on generalization questions, by question type, by
    the original rationale's utility and by source, with bootstrap 95% intervals (our choice). With a
    gold source among ``gold`` (names), its change is drawn on every panel for comparison (our
    addition: SPEC section 4 lists gold as one of the sources)."""
    panels = _generalization_panels(results)
    if not panels:
        return None
    by_source = (results.get("generalization") or {}).get("by_source") or {}
    reference = next((by_source[name]["accuracy_delta"] for name in sorted(by_source) if name in gold), None)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, data) in zip(axes[0], panels, strict=True):
        keys = _keys(title, data)
        vals = [data[k]["accuracy_delta"] for k in keys]
        lo = [v - data[k]["accuracy_delta_ci"][0] for k, v in zip(keys, vals, strict=True)]
        hi = [data[k]["accuracy_delta_ci"][1] - v for k, v in zip(keys, vals, strict=True)]
        colors = ["#999999" if title == "by source" and k in gold else "#4c72b0" for k in keys]
        ax.bar(keys, vals, yerr=[lo, hi], capsize=3, color=colors)
        per_answer = [data[k].get("delta_per_answer") for k in keys]
        if any(v is not None for v in per_answer):  # the other reading (a run from before it was recorded: none)
            ax.plot(range(len(keys)), [float("nan") if v is None else v for v in per_answer], "kx", linestyle="none",
                    label="per answer")
        ax.axhline(0, color="black", linewidth=0.8)
        if reference is not None:
            ax.axhline(reference, color="#555555", linestyle="--", linewidth=1, label="gold (for comparison)")
        ax.set_title(title)
        ax.set_xticks(range(len(keys)), [f"{k}\n(n={data[k]['n']})" for k in keys])
    axes[0][0].set_ylabel("accuracy after - before\n(bars: majority per unit, a tie wrong)")
    if reference is not None or any(row.get("delta_per_answer") is not None for _, data in panels
                                    for row in data.values()):
        axes[0][-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Generalization: change in accuracy with the rationale", y=1.04)
    return _save(fig, fmt)


PLOTS = {
    "utility_shares": utility_shares_figure,
    "gen_u_vs_utility": gen_u_vs_utility_figure,
    "generalization": generalization_figure,
}
HAS_DATA = {
    "utility_shares": lambda results: bool(results.get("utility_shares")),
    "gen_u_vs_utility": lambda results: bool(_gen_u_sources(results)),
    "generalization": lambda results: bool(_generalization_panels(results)),
}


def available(results: dict) -> list[str]:
    """The figures ``results`` has data for, in the report's order."""
    return [name for name in PLOTS if HAS_DATA[name](results)]
