"""Issue 24 through the services and the score: the same simulated crowd answers a study that
collects all five answers and one that stops each unit once it is decided; every unit's majority
correctness and utility are the same, the stopping study collects fewer answers, and its report says
it stopped early, shows the answers per unit and computes agreement on the answers collected."""
from __future__ import annotations

import hashlib
import random

import pytest

from annotations.models import Unit
from annotations.services.errors import NoWorkAvailable
from scoring.models import UnitScore
from scoring.reports.sections import report_sections
from scoring.services import study_score
from tests.annotations.factories import make_study
from tests.work import work

pytestmark = pytest.mark.django_db

N_ITEMS = 12


def crowd(worker: int):
    """Worker ``worker`` of a crowd right 70% of the time before the rationale and 80% after; the same
    worker gives the same answer to the same question in either study."""
    def answer(claim, step: str) -> str:
        item = claim.unit.item
        seed = hashlib.sha256(f"{worker}|{item.question}|{step}".encode()).hexdigest()
        right = random.Random(seed).random() < (0.7 if step == "before" else 0.8)
        return item.gold_answer if right else ("no" if item.gold_answer == "yes" else "yes")
    return answer


def run(stop: bool):
    study = make_study(name=f"crowd-{'stop' if stop else 'full'}", n_items=N_ITEMS, n_sources=1, quota=5,
                       units_per_task=N_ITEMS, stop_when_decided=stop)
    for worker in range(5):
        try:
            work(study, f"PID-{worker}", answer=crowd(worker))
        except NoWorkAvailable:
            break  # every unit decided before the crowd ran out
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    scores = {u.item.question: (u.before_correct, u.after_correct, u.utility)
              for u in UnitScore.objects.filter(study=study).select_related("item")}
    return study, run, scores


def test_the_same_crowd_scores_the_same_with_and_without_early_stopping():
    _full_study, full_run, full = run(stop=False)
    study, stopped_run, stopped = run(stop=True)
    assert stopped == full and len(full) == N_ITEMS
    early = stopped_run.results["early_stopping"]
    assert stopped_run.results["study"]["stop_when_decided"] is True
    assert full_run.results["study"]["stop_when_decided"] is False and "early_stopping" not in full_run.results
    assert early["answers_collected"] < N_ITEMS * 5
    assert early["answers_saved"] == N_ITEMS * 5 - early["answers_collected"] > 0
    assert sum(early["answers_per_unit"].values()) == N_ITEMS
    assert early["units_decided"] == Unit.objects.filter(study=study, decided_at__isnull=False, quota__lt=5).count() > 0
    agreement = stopped_run.results["agreement"]["before"]
    assert agreement["n_annotations"] == early["answers_collected"]
    # Units stopped early are not "short": they have what their stop left them.
    assert not [w for w in stopped_run.results["warnings"] if "short of" in w]


def test_the_report_says_the_study_stopped_early_with_answers_per_unit_and_agreement_on_those_collected():
    _study, stopped_run, _ = run(stop=True)
    sections = {s.key: s for s in report_sections(stopped_run)}
    early = sections["early_stopping"]
    assert not early.absent
    table = early.tables[0]
    assert sum(row["units"] for row in table.rows) == N_ITEMS
    assert any("agreement (SPEC section 2) is computed on the answers collected" in n for n in early.notes)
    assert any("Computed on the answers collected" in n for n in sections["agreement"].notes)
