"""The training report of a Quark job in the admin: reward, KL, entropy and loss over steps, the
validation reward and task accuracy at each checkpoint, and before/after on held-out and validation
items. Figures are matplotlib SVG drawn server-side (text as paths) from the job's params; every
value shown in HTML goes through Django's escaping."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from django.utils.html import format_html, format_html_join  # noqa: E402
from django.utils.safestring import SafeString, mark_safe  # noqa: E402

from studies.lm import genu as genu_rule  # noqa: E402
from studies.models import RationaleSource  # noqa: E402
from studies.services.generation.quark_policy import ACCURACY_NOTE, accuracy_parsed_only  # noqa: E402
from studies.services.generation.quark_rewards import reward_rules  # noqa: E402

plt.rcParams["svg.fonttype"] = "path"


def _svg(fig) -> SafeString:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    # Our own figure, text drawn as paths: no value from the job reaches the markup as text.
    return mark_safe(text[text.index("<svg"):])  # noqa: S308


def _series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(h["step"], h[key]) for h in history if h.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def training_figure(params: dict) -> SafeString | None:
    """Loss, KL and entropy per step; sampled reward per sampling round."""
    history = params.get("history") or []
    if not history:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(11, 2.8))
    for ax, keys, title in ((axes[0], ("loss", "nll"), "loss"), (axes[1], ("kl",), "KL(policy || reference)"),
                            (axes[2], ("entropy",), "entropy")):
        for key in keys:
            ax.plot(*_series(history, key), label=key, linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        if len(keys) > 1:
            ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return _svg(fig)


def evaluation_figure(params: dict) -> SafeString | None:
    """Mean sampled reward per sampling round, and validation reward and task accuracy at each
    checkpoint (step 0: the original model), the selected one marked."""
    history = params.get("history") or []
    evaluations = params.get("evaluations") or []
    if not history and not evaluations:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
    steps, rewards = _series(history, "sample_reward")
    axes[0].plot([s - 1 for s in steps], rewards, marker="o", linewidth=1, label="sampled (training items)")
    steps, values = _series(evaluations, "reward")
    axes[0].plot(steps, values, marker="s", linewidth=1, label="validation (greedy)")
    axes[0].set_title("mean reward", fontsize=9)
    steps, values = _series(evaluations, "accuracy")
    axes[1].plot(steps, values, marker="s", linewidth=1, color="#d95f02")
    axes[1].set_title("validation task accuracy (unparsed counted wrong)", fontsize=9)
    axes[1].set_ylim(0, 1)
    best = params.get("best")
    for ax in axes:
        ax.set_xlabel("step", fontsize=8)
        if best:
            ax.axvline(best["step"], color="grey", linestyle=":", linewidth=1, label="selected")
    axes[0].legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return _svg(fig)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def before_after_table(params: dict) -> SafeString:
    """Before/after rewards and task accuracy under both readings (``ACCURACY_NOTE``, the first of
    the notes under the table, says which is the default and what each counts), then the reward
    notes (:func:`reward_notes`)."""
    before = params.get("before") or {}
    report = params.get("report") or {}
    after = report.get("after") or {}
    rows = []
    for role, label in (("heldout", "held-out"), ("validation", "validation")):
        b, a = before.get(role) or {}, after.get(role) or {}
        rows.append((f"{label} mean reward", _fmt(b.get("reward")), _fmt(a.get("reward"))))
        if b.get("samples_per_item"):
            rows.append((f"{label} mean reward, {b['samples_per_item']} samples per item",
                         _fmt(b.get("sampled_reward")), _fmt(a.get("sampled_reward"))))
        rows.append((f"{label} task accuracy (unparsed counted wrong; the default)", _fmt(b.get("accuracy")),
                     _fmt(a.get("accuracy"))))
        # The validation "after" keeps the selected checkpoint's figures only; its parsed count is in ``best``.
        a_counts = {**(params.get("best") or {}), **a} if role == "validation" and a else a
        rows.append((f"{label} task accuracy (unparsed left out)", _fmt(accuracy_parsed_only(b)),
                     _fmt(accuracy_parsed_only(a_counts))))
    body = format_html_join("", "<tr><th>{}</th><td>{}</td><td>{}</td></tr>", rows)
    table = format_html('<table class="quark-before-after"><thead><tr><th></th><th>before (original)</th>'
                        "<th>after (selected checkpoint)</th></tr></thead><tbody>{}</tbody></table>", body)
    notes = format_html_join("", "<li>{}</li>", ((note,) for note in [ACCURACY_NOTE, *reward_notes(params)]))
    return format_html('{}<ul class="quark-reward-rules">{}</ul>', table, notes)


def reward_notes(params: dict) -> list[str]:
    """What decides the mean rewards above, in words: for Gen-U the tie rule, whether only validated
    questions count (``only_valid``) and the answerers by name; for any reward what an unparsed
    output gets and what is dropped. Read from the report once the run ends (as it was then), from
    the job's params and the rules' owners before."""
    report = params.get("report") or {}
    spec = params.get("reward", "")
    rules = {**reward_rules(spec), **{k: report[k] for k in ("unparsed_output_rule", "unscoreable_output_rule")
                                      if report.get(k)}}
    notes = []
    if spec == "genu":
        names = report.get("answerers")
        if names is None:
            found = dict(RationaleSource.objects.filter(pk__in=[params.get("answerer_i"), params.get("answerer_ir")])
                         .values_list("pk", "name"))
            names = {genu_rule.ANSWERER_NAMES[role]: found.get(params.get(key))
                     for key, role in (("answerer_i", "I"), ("answerer_ir", "IR"))}
        notes.append("Gen-U answerers: " + ", ".join(f"{role} {name or '(deleted)'}" for role, name in names.items()))
        only_valid = params.get("only_valid", True)
        notes.append(f"only_valid = {bool(only_valid)}: "
                     + ("validated generalization questions only" if only_valid
                        else "unvalidated generalization questions count too"))
        notes.append("Tie rule: " + (report.get("reward_tie_rule") or genu_rule.TIE_RULE_TEXT))
    if rules.get("unparsed_output_rule"):
        notes.append(f"Unparsed outputs: {rules['unparsed_output_rule']}.")
    if rules.get("unscoreable_output_rule"):
        counts = report.get("dropped_unscoreable") or {}
        shown = "; ".join(f"{role} {_count(c.get('before'))} before, {_count(c.get('after'))} after"
                          for role, c in counts.items())
        notes.append(f"Unscoreable outputs: {rules['unscoreable_output_rule']}" + (f" ({shown})." if shown else "."))
    return notes


def _count(value) -> str:
    return "—" if value is None else str(value)


def quark_report_html(params: dict) -> SafeString:
    """The whole report for a job's ``params``."""
    report = params.get("report") or {}
    step = params.get("checkpoint_step") or 0
    total = (params.get("settings") or {}).get("steps")
    parts = [format_html("<p>Reward <code>{}</code>; {} of {} steps checkpointed; {}.</p>", params.get("reward", ""),
                         step, total, report.get("selection") or "training")]
    for warning in report.get("warnings") or []:
        parts.append(format_html('<p class="warning">Warning: {}.</p>', warning))
    source = report.get("registered_source")
    if source:
        parts.append(format_html("<p>Selected step {} registered as source <strong>{}</strong> ({}).</p>",
                                 report.get("selected_step"), source["name"], source["model_name_or_path"]))
    parts.append(before_after_table(params))
    for figure in (training_figure(params), evaluation_figure(params)):
        if figure is not None:
            parts.append(format_html('<div class="quark-figure">{}</div>', figure))
    return format_html_join("", "{}", ((p,) for p in parts))
