"""Plain participant links: single-person links, open links, and publishing a study as links."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Bonus, OpenLink, ParticipantLink, PlatformCall, Publication
from annotations.services.links import link_public_url, links_generate, open_link_create
from annotations.services.participants import participant_link_redeem
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve
from tests.annotations.platforms.conftest import PUBLIC_URL, open_study, submitted


def test_links_are_unguessable_and_point_at_the_link_entry(study):
    links = links_generate(study=study, user=OPERATOR, n=20, label="Lab A")
    tokens = {link.token for link in links}
    assert len(tokens) == 20 and all(len(token) >= 43 for token in tokens)
    assert links[0].label == "Lab A 1"
    assert link_public_url(links[0]) == f"{PUBLIC_URL}/w/l/{links[0].token}/"


def test_an_open_link_has_its_public_url(study):
    link = open_link_create(study=study, user=OPERATOR, completion_code="LAB-2026", max_participants=2)
    assert link_public_url(link) == f"{PUBLIC_URL}/w/o/{link.token}/"


def test_open_link_rejects_a_bad_completion_code(study):
    with pytest.raises(PlatformServiceError, match="completion code"):
        open_link_create(study=study, user=OPERATOR, completion_code="<script>")


def test_publishing_as_links_makes_one_link_per_task_once(study):
    first = study_publish(user=OPERATOR, study=study, platform_name="link")
    second = study_publish(user=OPERATOR, study=study, platform_name="link")
    assert first.pk == second.pk and first.status == Publication.Status.PUBLISHED
    assert ParticipantLink.objects.filter(publication=first).count() == 14
    assert not PlatformCall.objects.exists()  # no money moves


def test_publishing_an_open_link_uses_the_publication_code(study):
    publication = study_publish(user=OPERATOR, study=study, platform_name="link", options={"link_mode": "open"})
    link = OpenLink.objects.get(publication=publication)
    assert link.completion_code == publication.completion_code and link.max_participants == 14


def test_review_and_bonus_of_link_work_move_no_money(study):
    open_study(study)
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    participant = participant_link_redeem(link=link)
    work = submitted(study, platform="link", worker_id=participant.external_id, assignment_id="")
    assignment_approve(user=OPERATOR, study=work.study, assignment=work)
    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Thanks for coming to the lab.")
    assert bonus.status == Bonus.Status.RECORDED
    assert not PlatformCall.objects.exists()


def test_closing_a_study_stops_every_link_a_publication_did_not_make(study):
    # The publish page's "open link" and `manage.py make_links` make links with no link publication:
    # closing the study stops them too, as it stops a publication's.
    open_study(study)
    link = open_link_create(study=study, user=OPERATOR)
    unused, = links_generate(study=study, user=OPERATOR, n=1)
    assert not Publication.objects.filter(study=study).exists()

    study_close(user=OPERATOR, study=study)

    link.refresh_from_db()
    unused.refresh_from_db()
    assert not link.active and unused.revoked
