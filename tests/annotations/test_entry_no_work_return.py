"""A Prolific worker who gets no task here (no work left for them, or the study closed) is asked to
return the place, as the time-over page asks (``views.entry._return_line``): otherwise the place
stays held, unpaid, until it times out. A link study's participant holds no platform place."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import consent, entry_url, start
from tests.annotations.platforms.conftest import prolific, prolific_server  # noqa: F401

pytestmark = pytest.mark.django_db

RETURN = "Please return the task on Prolific."
ONE_UNIT = {"n_items": 1, "n_sources": 1, "quota": 1, "units_per_task": 1}


def _prolific_study():
    study = make_study(platform=Platform.PROLIFIC, status="draft", reward=2, **ONE_UNIT)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id


def _arrival(study, prolific_id: str, n: int) -> str:
    return entry_url(study, PROLIFIC_PID=f"5a9d64f5f6dfdd0001eaa7{n:02d}", STUDY_ID=prolific_id,
                     SESSION_ID=f"5b0d64f5f6dfdd0001eaa7{n:02d}")


def test_a_prolific_worker_with_no_work_left_is_asked_to_return_the_place(prolific):  # noqa: F811
    study, prolific_id = _prolific_study()
    start(Client(), _arrival(study, prolific_id, 1))  # the one unit's one place
    response = consent(Client(), _arrival(study, prolific_id, 2))
    assert response.status_code == 409
    text = response.content.decode()
    assert "every question you have not yet seen" in text and RETURN in text


def test_a_prolific_worker_landing_on_a_closed_study_is_asked_to_return_the_place(prolific):  # noqa: F811
    study, prolific_id = _prolific_study()
    study_close(user=OPERATOR, study=study)
    response = Client().get(_arrival(study, prolific_id, 3))
    assert response.status_code == 403
    text = response.content.decode()
    assert "Study closed" in text and RETURN in text


def test_a_link_participant_is_not_asked_to_return_anything():
    study = make_study(platform=Platform.LINK, **ONE_UNIT)
    start(Client(), entry_url(study))
    refused = consent(Client(), entry_url(study))
    assert refused.status_code == 409 and "Please return" not in refused.content.decode()
    study_close(user=OPERATOR, study=study)
    closed = Client().get(entry_url(study))
    assert closed.status_code == 403 and "Please return" not in closed.content.decode()
