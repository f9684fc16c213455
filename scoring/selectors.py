"""Reads of the scoring app."""
from __future__ import annotations

from scoring.models import ScoreRun, UnitScore
from studies.models import Study


def score_run_latest(*, study: Study) -> ScoreRun | None:
    """The study's latest finished run."""
    return ScoreRun.objects.filter(study=study, status=ScoreRun.Status.DONE).order_by("-finished_at", "-pk").first()



def imported_outcomes_count(*, study: Study) -> int:
    """How many (item, source) outcomes of a study run elsewhere ``study`` holds."""
    return UnitScore.objects.filter(study=study, imported=True).count()
