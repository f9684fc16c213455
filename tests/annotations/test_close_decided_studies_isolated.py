"""Beat's fallback close of decided studies (``tasks.assignments.close_decided_studies``) goes on past
a study whose close fails: an audit made the first decided study's close raise, and every beat pass
raised with it, so later decided studies kept recruiting."""
from __future__ import annotations

import pytest

from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.tasks import assignments as tasks
from studies.models import Study
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db


def decided_study() -> Study:
    """A study of one unit that stops early, decided by three right answers (its close not run)."""
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, stop_when_decided=True)
    for _ in range(3):
        task = assignment_start(study=study, participant=ParticipantFactory())
        for claim in task.claims.select_related("unit__item"):
            for step in ("before", "after"):
                annotation_submit(assignment=task, claim=claim, step=step, answer=claim.unit.item.gold_answer)
        assignment_submit(assignment=task)
    return study


def test_a_failing_close_does_not_keep_the_next_decided_study_open(monkeypatch, caplog):
    broken, fine = decided_study(), decided_study()
    real = tasks.study_close_when_decided

    def close(*, study):
        if study.pk == broken.pk:
            raise RuntimeError("the platform client blew up")
        return real(study=study)

    monkeypatch.setattr(tasks, "study_close_when_decided", close)
    assert tasks.close_decided_studies() == 1

    broken.refresh_from_db()
    fine.refresh_from_db()
    assert (broken.status, fine.status) == (Study.Status.OPEN, Study.Status.CLOSED)
    assert f"closing decided study {broken.pk} failed" in caplog.text
