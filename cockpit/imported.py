"""The study page of a study run elsewhere (imported outcomes, ``scoring.services.outcomes``):
it says what the study is (which file, when, how many outcomes) instead of a design to run, and
offers what applies to it: the report, the export, scoring again."""
from __future__ import annotations

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from scoring.selectors import bundle_scores, imported_outcomes_count, score_run_latest
from studies.models import Study
from studies.selectors import study_outcome_imports

# The pages of a study (``cockpit.views_common.study_links`` keys) that apply to imported outcomes:
# nobody works on it, so progress, workers, answers, flags, publishing and publications do not.
IMPORTED_LINKS = ("study", "score_runs", "report", "export_scores")


def imported_origin(study: Study) -> str:
    """One sentence: what this study is and where its outcomes came from."""
    records = list(study_outcome_imports(study=study)[:1])
    n = imported_outcomes_count(study=study)
    if not records:
        return f"A study run elsewhere: {n:,} imported (item, source) outcomes. Nothing is collected here."
    record = records[0]
    return (f"A study run elsewhere: {n:,} (item, source) outcomes imported from {record.filename} on "
            f"{timezone.localtime(record.imported_at):%Y-%m-%d %H:%M %Z}. Nothing is collected or paid here: "
            "score it, read its report or export its scores.")


def imported_table(study: Study) -> str:
    """The study page's "Design at a glance" for imported outcomes: what it holds, no cost."""
    records = list(study_outcome_imports(study=study))
    rows = [
        ("What it is", "Outcomes of a study run elsewhere (imported; no workers, no pay)"),
        ("Items", f"{study.items.count():,}"),
        ("Rationale sources", ", ".join(study.sources.order_by("name").values_list("name", flat=True)) or "—"),
        ("Outcomes (item, source)", f"{imported_outcomes_count(study=study):,}"),
    ]
    rows += [("Imported from" if i == 0 else "Imported before",
              f"{r.filename} on {timezone.localtime(r.imported_at):%Y-%m-%d %H:%M %Z} "
              f"({r.created:,} created, {r.updated:,} updated, {r.unchanged:,} unchanged)")
             for i, r in enumerate(records[:3])]
    body = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    return format_html('<table class="rl-design" id="imported-outcomes">{}</table>', body)


def export_scores_url(study: Study) -> str:
    return reverse("api:study-export-scores", args=[study.pk]) + "?file_format=csv"


def bundle_scores_origin(study: Study) -> str:
    """One sentence for a copy imported from a study bundle: where the unit scores it imported came
    from and whether the bundle called them stale (``scoring.selectors.bundle_scores``, which the
    `stale` column of the API and the score export reads too), and whether a run here has scored it
    since; '' for any other study."""
    bundle = bundle_scores(study=study)
    if bundle is None:
        return ""
    run = score_run_latest(study=study)
    if run is None:
        return f"Its unit scores were {bundle.origin()}. Score it to compute them from its answers."
    return (f"Its unit scores are run {run.pk}'s, scored here from its answers; those it imported were "
            f"{bundle.origin()}.")
