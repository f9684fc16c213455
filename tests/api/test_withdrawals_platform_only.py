"""The withdrawals API withdraws a worker the study knows only from its platform's rows (sync
stored their Prolific id for work with no task here): 201 and the record, where it answered 404
(``ParticipantNotFound``) and their raw id stayed."""
from __future__ import annotations

import pytest

from annotations.models import PlatformSubmission, Withdrawal
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.sync import study_sync
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import open_study, prolific, prolific_server  # noqa: F401
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def test_the_api_withdraws_a_worker_known_only_from_the_platforms_rows(prolific, client_for, researcher):  # noqa: F811
    _platform, server = prolific
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", platform="prolific",
                       owner=researcher)
    open_study(study)
    pid = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    server.add_submission(pid, participant_id="p_ghost")
    study_sync(study=study)
    assert PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    grant(researcher, "studies.change_study")
    api = client_for(researcher)

    response = api.post(f"/api/v1/studies/{study.pk}/withdrawals/",
                        {"pseudonym": worker_pseudonym("prolific", "p_ghost")}, format="json")

    assert response.status_code == 201, response.content
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    assert "p_ghost" not in api.get(f"/api/v1/studies/{study.pk}/withdrawals/").content.decode()
