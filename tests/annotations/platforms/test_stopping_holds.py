"""Issue 24: work that sync held (another worker's platform id) does not count, so it decides
nothing; when a researcher clears the hold its answers count and may decide the unit."""
from __future__ import annotations

import pytest

from annotations.models import PlatformSubmission, Unit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import submission_clear
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import publish_on, submitted

pytestmark = pytest.mark.django_db


def test_clearing_a_hold_makes_its_answers_count_and_decides_the_unit(prolific):
    _platform, server = prolific
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, status="draft", stop_when_decided=True)
    publication = publish_on(study, "prolific")
    real = server.add_submission(publication.prolific_study_id, participant_id="p_real")
    submitted(study, platform="prolific", worker_id="p_fabricated", assignment_id=real["id"],
              task_id=publication.prolific_study_id)
    study_sync(study=study)
    held = PlatformSubmission.objects.get(platform_assignment_id=real["id"])
    assert held.flag == PlatformSubmission.Flag.WORKER_MISMATCH
    for n in range(2):
        honest = server.add_submission(publication.prolific_study_id, participant_id=f"p_honest_{n}")
        submitted(study, platform="prolific", worker_id=f"p_honest_{n}", assignment_id=honest["id"],
                  task_id=publication.prolific_study_id)
    unit = Unit.objects.get(study=study)
    assert unit.decided_at is None  # two right answers count; the held third does not

    submission_clear(user=OPERATOR, submission=held)

    unit.refresh_from_db()
    assert unit.decided_at is not None and unit.quota == unit.n_claimed == 3
