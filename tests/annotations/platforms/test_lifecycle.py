"""A study's life through the services (issue 11, bugs 2 and 3): publishing a draft opens it
through the one ``study_open`` (its units are built, so arriving workers get work), a study that
cannot open is refused before anything is published, and the one ``study_close`` closes the
platform side with the study; rejected work gives its slots back."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, ParticipantLink, Publication, Unit
from annotations.selectors import claims_that_count
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms import publish as publish_module
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_reject
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import on_platform, start_assignment, submitted


def test_publishing_a_draft_opens_it_with_its_units_and_workers_get_work(study):
    assert study.status == Study.Status.DRAFT and not Unit.objects.filter(study=study).exists()

    publication = study_publish(user=OPERATOR, study=study, platform_name="link")

    assert publication.status == Publication.Status.PUBLISHED
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    assert Unit.objects.filter(study=study).count() == 8  # 4 items x 2 sources
    work = start_assignment(study, platform="link", worker_id="lab-1", assignment_id="")
    assert work.status == Assignment.Status.ACTIVE and work.claims.count() == 3


def test_a_draft_that_cannot_open_is_refused_before_anything_is_published(db):
    draft = make_study(status="draft", consent_text="")

    with pytest.raises(PlatformServiceError, match="no consent text"):
        study_publish(user=OPERATOR, study=draft, platform_name="link")

    draft.refresh_from_db()
    assert draft.status == Study.Status.DRAFT
    assert not Publication.objects.filter(study=draft).exists()


def test_closing_a_link_study_closes_its_links_and_the_study(study):
    publication = study_publish(user=OPERATOR, study=study, platform_name="link")

    closed = study_close(user=OPERATOR, study=study)
    assert study_close(user=OPERATOR, study=study) == []  # idempotent: nothing left to close

    assert [p.pk for p in closed] == [publication.pk]
    publication.refresh_from_db()
    assert study.status == Study.Status.CLOSED and publication.status == Publication.Status.CLOSED
    assert not publication.participant_links.filter(revoked=False).exists()


def test_rejecting_through_the_review_service_gives_the_slots_back(study):
    study_publish(user=OPERATOR, study=study, platform_name="link")
    work = submitted(study, platform="link", worker_id="lab-1", assignment_id="")
    units = list(work.claims.filter(unit__isnull=False).values_list("unit_id", flat=True))
    assert set(Unit.objects.filter(pk__in=units).values_list("n_claimed", "n_completed")) == {(1, 1)}

    assignment_reject(user=OPERATOR, study=work.study, assignment=work, feedback="Every attention check failed.")

    work.refresh_from_db()
    assert work.status == Assignment.Status.REJECTED and work.reviewed_at is not None
    assert set(Unit.objects.filter(pk__in=units).values_list("n_claimed", "n_completed")) == {(0, 0)}
    assert not claims_that_count(study=study).filter(assignment=work).exists()


# --- one study, one platform: its own --------------------------------------------------------------

@pytest.mark.parametrize("dry_run", [False, True])
def test_a_draft_is_not_published_on_another_platform_than_its_own(mturk, study, dry_run):
    # The study runs on participant links: MTurk HITs for it would send workers to an entry that
    # reads no MTurk ids, and pay them by rules the study does not name.
    platform, stubber = mturk  # nothing queued: any MTurk call would fail

    with pytest.raises(PlatformServiceError) as refused:
        study_publish(user=OPERATOR, study=study, platform_name="mturk", dry_run=dry_run)

    message = refused.value.message
    assert "cannot be published on Amazon Mechanical Turk" in message
    assert "platform field) is Participant links" in message and "change its platform on the study page" in message
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT and study.platform == "link"
    assert not Publication.objects.filter(study=study).exists()


def test_an_open_study_is_not_published_on_another_platform_and_the_reason_is_the_lock(db):
    study = make_study(platform="prolific", reward=2)  # open: its platform is fixed

    with pytest.raises(PlatformServiceError) as refused:
        study_publish(user=OPERATOR, study=study, platform_name="link")

    assert "its platform cannot change" in refused.value.message  # the lock's own words
    assert "copy the study to run it elsewhere" in refused.value.message
    assert not Publication.objects.filter(study=study).exists()


def test_the_platform_named_is_checked_against_the_studys_row_not_the_callers_copy(study):
    # A copy read before the draft moved to Prolific still says "link": what is published is
    # decided by the study's row, so the copy's platform is refused rather than published on.
    stale = Study.objects.get(pk=study.pk)
    on_platform(study, "prolific")

    with pytest.raises(PlatformServiceError, match="cannot be published on Participant links"):
        study_publish(user=OPERATOR, study=stale, platform_name=stale.platform)

    assert not Publication.objects.filter(study=study).exists()


def test_a_draft_moved_to_another_platform_while_it_opens_gets_no_publication_on_the_old_one(study):
    # Read as a link study, then moved to Prolific by a concurrent edit before the publish opens
    # it: the publication is made under the study's lock, where its platform is read again.
    real_open = publish_module.study_open

    def moved_then_opened(*, study, user):
        on_platform(Study.objects.get(pk=study.pk), "prolific")
        return real_open(study=study, user=user)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(publish_module, "study_open", moved_then_opened)
        with pytest.raises(PlatformServiceError, match="cannot be published on Participant links"):
            study_publish(user=OPERATOR, study=study)

    assert not Publication.objects.filter(study=study).exists()
    assert not ParticipantLink.objects.filter(study=study).exists()

