"""How precise will this study be? The planner's figures on the study's pages.

``/admin/studies/study/<id>/precision/`` shows, for the saved design (items x sources x workers per
unit, majority vote), each source's expected useful / not-useful share with the half-width of its
95% interval, the smallest difference between two sources' useful shares detected with 80% power
(paired by item), and, for a difference the researcher enters, the items needed. The prior is the
released study's shares or a scored pilot's (``?prior=``). The numbers come from
``scoring.selectors.study_precision`` (a simulation of the scoring pipeline's majority vote,
``scoring.metrics.planning``), under scoring's default majority rule (the plurality, named on the page)
and, with three or more answer choices, the strict majority too (scoring's other reading). A pilot
prior is fitted to the workers its units actually had, which the page states apart from the design's
workers per unit. Figures are cached per design and prior (``scoring.selectors.plan_cache_key``).
The design summary shows the same figures with the default prior, and the publish page (``annotations``, which may not import ``scoring``) shows them through the
panel hook ``annotations.admin.platforms.PUBLISH_PAGE_PANELS``, registered in ``CockpitConfig.ready``."""
from __future__ import annotations

from decimal import Decimal

from django import forms
from django.http import Http404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse

from cockpit.views_common import study_context, study_for
from scoring.metrics import planning
from scoring.metrics.labels import MAJORITY_RULES, MAJORITY_SPEC
from scoring.selectors import (
    RELEASED_PRIOR,
    plan_prior,
    plan_prior_choices,
    score_run_latest,
    study_answer_choices,
    study_precision,
)
from scoring.services.bundle.export import scores_staleness
from studies.models import Study
from studies.selectors import study_design_summary

METHOD = (
    "Method: {n_sims:,} simulated studies of this design{sims_note}. Each worker answers right with a per-source "
    "probability before and after the rationale (fitted so that the majority of the prior's workers "
    "reproduces the prior's useful / unsure / not-useful shares), and otherwise picks a wrong answer at "
    "random among the {choices} answer choices; each unit's before and after answers go through the scoring's "
    "majority vote (a tie counts as wrong) and utility table. Majority rule of these figures: {rule} "
    "(scoring's default reading; {spec}). {other} The interval half-width is 1.96 standard deviations of a "
    "source's share over the simulated studies. The detectable difference is the "
    "smallest rise in a second source's useful share (its after-answers better, its before-answers the "
    "same) that McNemar's exact test (two-sided, 5%) on the same items detects in 80% of the simulated "
    "studies, starting from the prior's pooled shares. Units are simulated as independent (no item "
    "effect shared by the sources), which leaves the detectable difference on the cautious side."
)


def _other_reading(result: planning.Precision) -> str:
    if result.readings_coincide:
        return ("With two answer choices a plurality is more than half of the workers, so the other reading, "
                f"{MAJORITY_RULES[result.other_rule]}, gives the same figures.")
    return (f"The other reading, {MAJORITY_RULES[result.other_rule]}, which scoring reports beside the default "
            "(results.json majority_readings), gets its own table from the same simulated answers.")


def method_text(result: planning.Precision) -> str:
    """The method line of these figures: the majority rule they use and the other reading, and the
    simulations each one actually ran (fewer than asked for a design of many items, and why)."""
    sims_note = ""
    if result.n_sims_asked is not None and result.n_sims < result.n_sims_asked:
        sims_note = (f" (not the planner's usual {result.n_sims_asked:,}: to bound a page's time and memory a "
                     f"source is simulated on at most {planning.MAX_UNIT_SIMS:,} units, so a design of "
                     f"{result.n_items:,} items runs {result.n_sims:,} studies, never fewer than "
                     f"{planning.MIN_SIMS:,}, drawn {planning.CHUNK_UNITS:,} units at a time)")
    text = METHOD.format(n_sims=result.n_sims, sims_note=sims_note, choices=result.choices,
                         rule=MAJORITY_RULES[result.rule], spec=MAJORITY_SPEC, other=_other_reading(result))
    if result.items_needed_sims is not None:
        text += (f" The items needed for the difference asked are searched with {result.items_needed_sims:,} "
                 "simulated studies per candidate number of items.")
    text += " Figures computed once per design and prior, then kept in the cache."
    return text


class PrecisionForm(forms.Form):
    prior = forms.ChoiceField(required=False, label="Expected shares from")
    difference = forms.DecimalField(
        required=False, min_value=Decimal("0.005"), max_value=Decimal("0.995"), max_digits=4, decimal_places=3,
        label="Difference to detect",
        help_text="A difference between two sources' useful shares, as a fraction (0.10 = ten points).",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["prior"].choices = plan_prior_choices(user=user)
        self.fields["prior"].initial = RELEASED_PRIOR


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def precision_figures(*, study: Study, prior_key: str = RELEASED_PRIOR, user, difference: float | None = None):
    """(result, notes, prior) for ``study``'s saved design; a pilot prior whose run no longer matches
    the pilot's answers says so (``pilot_prior_stale_note``)."""
    prior = plan_prior(user=user, key=prior_key)
    n_items = study_design_summary(study=study).items
    result, notes = study_precision(study=study, prior=prior, n_items=n_items, difference=difference)
    stale = pilot_prior_stale_note(prior_key=prior.key, user=user)
    return result, [*notes, stale] if stale else notes, prior


def pilot_prior_stale_note(*, prior_key: str, user) -> str:
    """What the page says when the pilot whose latest run gives the prior (``pilot:<id>``) changed
    since that run read its answers, by the one staleness rule of a run
    (``scoring.services.bundle.export.scores_staleness``: units whose counting answers changed, answers
    withdrawn since, a pilot of imported outcomes whose outcomes a later import changed), or ''. The
    figures rest on that run's shares: a participant who withdrew after it or work rejected since is
    still in them, and outcomes imported again since are not, until the pilot is scored again."""
    if not prior_key.startswith("pilot:"):
        return ""
    pilot = Study.objects.get(pk=int(prior_key.split(":", 1)[1]))
    run = score_run_latest(study=pilot)
    stale = scores_staleness(pilot, run, user=user) if run is not None else None
    if not stale or not stale["stale"]:
        return ""
    withdrawn = stale["withdrawn_since_run"]["counted_answers"]
    what = [f"{stale['stale_units']} of its {stale['scored_units']} scored units are stale"] if stale["stale_units"] else []
    if withdrawn:
        what.append(f"{withdrawn} counted answers were withdrawn since")
    reimported = stale.get("outcomes_reimported_since_run")
    if reimported:
        what.append(f"its outcomes were imported again since ({reimported['filename']}: {reimported['created']} "
                    f"created, {reimported['updated']} updated, {reimported['removed']} removed)")
    return (f"The pilot's latest scored run ({stale['score_run']}) no longer matches its "
            f"{'outcomes' if reimported else 'answers'}"
            f"{': ' + ' and '.join(what) if what else ''}. These figures rest on that run's shares: score the pilot "
            "again for a prior from the answers that count now.")


def precision_html(*, study: Study, user=None, compact: bool = True) -> str:
    """The planner's table with the default prior (the released study's: no user needed), for the
    design summary and the publish page."""
    if study.is_imported_outcome:
        return ""
    result, notes, prior = precision_figures(study=study, user=user)
    return render_to_string("cockpit/study/_precision.html", {
        **_context(result, notes, prior, compact=compact),
        "page_url": reverse("admin:studies_study_precision", args=[study.pk]),
    })


def _rows(result: planning.Precision, *, other: bool = False) -> list[tuple[str, str, str, str, str]]:
    """The table's rows: under the figures' rule, or (``other``) the other reading's."""
    return [(s.name, _pct(s.useful), f"± {_pct(s.useful_half_width)}", _pct(s.not_useful),
             f"± {_pct(s.not_useful_half_width)}") for s in (result.other_sources if other else result.sources)]


def _context(result: planning.Precision, notes, prior, *, compact: bool) -> dict:
    """What ``_precision.html`` shows, on the planner's page and its panels alike."""
    return {
        "result": result, "notes": notes, "prior": prior, "rows": _rows(result), "compact": compact,
        "other_rows": _rows(result, other=True), "rule": MAJORITY_RULES[result.rule],
        "other_rule": MAJORITY_RULES[result.other_rule],
        "detectable": _pct(result.detectable_difference), "method": method_text(result),
    }


# Why a study of imported outcomes has no planner (its panel is not shown, and its page is a 404):
# it collects no answers, and its design fields (workers per unit, say) are defaults nobody chose.
NOTHING_TO_PLAN = ("this study holds outcomes imported from a file: it collects no answers, so there is no design "
                   "to plan the precision of")


def precision_view(model_admin, request, study_id: int):
    study = study_for(request, study_id)
    if study.is_imported_outcome:
        raise Http404(NOTHING_TO_PLAN)
    form = PrecisionForm(request.GET or None, user=request.user)
    prior_key, difference, errors = RELEASED_PRIOR, None, []
    if request.GET:
        if form.is_valid():
            prior_key = form.cleaned_data.get("prior") or RELEASED_PRIOR
            value = form.cleaned_data.get("difference")
            difference = float(value) if value is not None else None
        else:
            for name, messages in form.errors.items():
                label = form.fields[name].label if name in form.fields else name
                errors.extend(f"{label}: {message}" for message in messages)
    try:
        prior = plan_prior(user=request.user, key=prior_key)
    except ValueError as exc:  # offered, but its latest run has no shares to plan from
        errors.append(f"{form.fields['prior'].label}: {exc}")
        prior_key = RELEASED_PRIOR
        prior = plan_prior(user=request.user, key=prior_key)
    if difference is not None:
        raters = min(max(study.annotators_per_unit, 1), planning.MAX_RATERS)
        choices = min(study_answer_choices(study=study), planning.MAX_CHOICES)
        top = planning.max_difference(prior.pooled, raters, choices)
        if difference > top:
            errors.append(f"Difference to detect: {difference:.3f} is more than this prior allows with "
                          f"{raters} workers per unit (at most {top:.3f}: every after-answer right).")
            difference = None
    result, notes, prior = precision_figures(study=study, prior_key=prior_key, user=request.user,
                                             difference=difference)
    context = {
        **study_context(model_admin.admin_site, request, study, f"Precision: {study.name}"),
        **_context(result, notes, prior, compact=False),
        "form": form, "errors": errors, "difference": difference,
    }
    status = 400 if errors else 200
    return TemplateResponse(request, "cockpit/study/precision.html", context, status=status)


def publish_panel(request, study: Study) -> str:
    """The publish page's panel (``annotations.admin.platforms.PUBLISH_PAGE_PANELS``)."""
    return precision_html(study=study, user=request.user)


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view
    return [path("<int:study_id>/precision/", view(lambda request, study_id: precision_view(model_admin, request,
                                                                                          study_id)),
                 name="studies_study_precision")]
