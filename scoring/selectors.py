"""Reads of the scoring app."""
from __future__ import annotations

from scoring.models import ScoreRun
from studies.models import Study


def score_run_latest(*, study: Study) -> ScoreRun | None:
    """The study's latest finished run."""
    return ScoreRun.objects.filter(study=study, status=ScoreRun.Status.DONE).order_by("-finished_at", "-pk").first()


def report_tables(results: dict) -> dict:
    """The report's tables as lists of rows, shared by the admin page and the CSV export."""
    from scoring.services.export import agreement_rows, association_rows, generalization_rows, share_rows

    return {
        "utility_shares": share_rows(results),
        "gen_u_shares": share_rows(results, "gen_u_shares"),
        "associations": association_rows(results),
        "agreement": agreement_rows(results),
        "generalization": generalization_rows(results),
    }
