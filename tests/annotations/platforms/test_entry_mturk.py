"""Arriving from MTurk: the study is published as HITs on the stubbed MTurk client, and workers
enter through the HTTP pages with the ids MTurk's ExternalQuestion sends. The ``hitId`` must be one
of the study's own HITs (a published publication, not a dry run), as a Prolific ``STUDY_ID`` must be
its own Prolific study: a made-up or another study's HIT id is refused like any other bad
parameter, and nothing is stored under it."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, Participant, PlatformAssignmentBinding
from annotations.platforms import handoff
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, start
from tests.annotations.platforms.mturk_stubs import published_as

# MTurk's ids as it writes them: 30 uppercase letters and digits.
OWN_HIT, OTHER_HIT, MADE_UP_HIT = ("3OWNHITAAAAAAAAAAAAAAAAAAAAAAA", "3OTHERHITAAAAAAAAAAAAAAAAAAAAA",
                                   "3MADEUPHITAAAAAAAAAAAAAAAAAAAA")
WORKER, ASSIGNMENT = "AWORKERONE", "3ASSIGNMENTAAAAAAAAAAAAAAAAAAA"
SANDBOX = "https://workersandbox.mturk.com"

pytestmark = pytest.mark.django_db


def _study(**fields):
    return make_study(platform="mturk", n_items=2, n_sources=1, units_per_task=1, **fields)


def mturk_params(*, hit: str = OWN_HIT, worker: str = WORKER, assignment: str = ASSIGNMENT) -> dict:
    return {"assignmentId": assignment, "hitId": hit, "workerId": worker, "turkSubmitTo": SANDBOX}


def nothing_stored() -> bool:
    return not (Participant.objects.exists() or Assignment.objects.exists()
                or PlatformAssignmentBinding.objects.exists())


@pytest.fixture
def published(mturk):
    """An MTurk study published through the app as one HIT, ``OWN_HIT``."""
    study = _study(status="draft")
    published_as(mturk[1], study, OWN_HIT)
    study.refresh_from_db()
    return study


def test_a_made_up_hit_id_is_refused_and_the_studys_own_hit_still_lets_the_worker_in(client, published):
    url = entry_url(published, **mturk_params(hit=MADE_UP_HIT))  # well formed, never published

    for response in (client.get(url), client.post(url, {"consent": "yes"})):
        assert response.status_code == 400
        assert "hitId is not one of this study&#39;s HITs" in response.content.decode()
    assert nothing_stored()

    preview = client.get(entry_url(published, assignmentId=handoff.MTURK_PREVIEW_ID, hitId=OWN_HIT))
    assert preview.status_code == 200 and nothing_stored()  # the preview still shows, storing nothing
    start(client, entry_url(published, **mturk_params()))
    assignment = Assignment.objects.select_related("participant").get()
    assert (assignment.platform_task_id, assignment.platform_assignment_id, assignment.participant.external_id) == (
        OWN_HIT, ASSIGNMENT, WORKER)


def test_another_studys_hit_does_not_open_this_study(mturk):
    _, stubber = mturk
    hers, this = _study(name="hers"), _study(name="this")
    published_as(stubber, hers, OTHER_HIT)
    published_as(stubber, this, OWN_HIT)

    response = Client().get(entry_url(this, **mturk_params(hit=OTHER_HIT)))

    assert response.status_code == 400 and "hitId" in response.content.decode()
    assert nothing_stored()


def test_a_study_published_only_as_a_dry_run_admits_no_mturk_worker():
    # A dry run sends nothing, so MTurk never made a HIT a worker could have come from.
    study = _study()  # open
    dry = study_publish(user=OPERATOR, study=study, dry_run=True)
    assert dry.dry_run and not dry.hit_ids

    response = Client().get(entry_url(study, **mturk_params()))

    assert response.status_code == 400 and "hitId" in response.content.decode()
    assert nothing_stored()


def test_the_hit_is_checked_after_its_format_in_one_read_and_a_preview_reads_nothing(published,
                                                                                   django_assert_num_queries):
    with django_assert_num_queries(0), pytest.raises(handoff.ArrivalError, match="not a valid MTurk HIT id"):
        handoff.arrival_parse(study=published, params=mturk_params(hit="3own-hit"))
    with django_assert_num_queries(1):  # the study's publications, by their index
        arrival = handoff.arrival_parse(study=published, params=mturk_params())
    assert arrival.task_id == OWN_HIT
    with django_assert_num_queries(1), pytest.raises(handoff.ArrivalError, match="hitId is not one of this study"):
        handoff.arrival_parse(study=published, params=mturk_params(hit=MADE_UP_HIT))
    with django_assert_num_queries(0):
        assert handoff.arrival_parse(study=published, params={"assignmentId": handoff.MTURK_PREVIEW_ID,
                                                              "hitId": MADE_UP_HIT}).preview
