"""The researcher's page in the admin and the management commands, end to end: estimate, dry-run
MTurk publish, Prolific (against the local server) and links, sync, approve, bonus; the audit
table shows each money-moving call once."""
from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotations.models import Assignment, Bonus, ParticipantLink, PlatformCall, Publication
from tests.annotations.platforms.conftest import on_platform, submitted
from tests.annotations.platforms.test_prolific import REJECTION


@pytest.fixture
def researcher(client, django_user_model):
    user = django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used")
    client.force_login(user)
    return user


def _page(study) -> str:
    return reverse("admin:annotations_publication_publish", args=[study.pk])


def test_page_shows_estimate_hourly_pay_and_buttons(client, researcher, study):
    on_platform(study, "mturk")
    response = client.get(_page(study))
    assert response.status_code == 200
    html = response.content.decode()
    assert "33.60 USD" in html and "20.00/hour" in html and "Dry run" in html
    assert client.get(reverse("admin:annotations_publication_studies")).status_code == 200


def test_page_needs_a_staff_login(client, study):
    response = client.get(_page(study))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_get_never_publishes(client, researcher, study):
    client.get(_page(study) + "?platform=mturk&action=publish")
    assert not Publication.objects.exists()


def test_balance_error_is_shown_not_raised(client, researcher, study, aws_env, settings):
    settings.RL_PROLIFIC_TOKEN = "x"
    response = client.get(_page(study) + "?platform=prolific&balance=1")
    assert response.status_code == 200
    assert "no balance call" in response.content.decode()


def test_the_accounts_balance_is_asked_only_for_who_may_publish_the_study(client, researcher, study, mturk):
    """A collaborator with a view share opens the publish page and asks for the balance: before, the
    page asked MTurk and showed the lab's shared account balance to anyone who could read the study."""
    from studies.models import StudyShare
    from studies.services.sharing import study_share
    from tests.cockpit.conftest import staff_client

    _platform, stubber = mturk
    on_platform(study, "mturk")
    reader, reader_client = staff_client("vera")
    study_share(study=study, user=researcher, with_user=reader, level=StudyShare.Level.VIEW)  # a superuser shares it
    stubber.add_response("get_account_balance", {"AvailableBalance": "12345.67"}, {})

    refused = reader_client.get(_page(study) + "?platform=mturk&balance=1")
    assert refused.status_code == 200
    assert "12345.67" not in refused.content.decode()
    assert "shown only to who may publish this study" in refused.content.decode()

    shown = client.get(_page(study) + "?platform=mturk&balance=1")  # the superuser may publish it
    assert "12345.67" in shown.content.decode()
    stubber.assert_no_pending_responses()


def test_researcher_journey_through_the_admin(client, researcher, study, prolific):
    platform, server = prolific
    url = _page(study)

    # The study runs on Prolific: a dry run first, which sends nothing and writes nothing money-moving.
    on_platform(study, "prolific")
    response = client.post(url, {"action": "publish", "platform": "prolific", "dry_run": "on"}, follow=True)
    assert response.status_code == 200
    dry = Publication.objects.get(dry_run=True)
    assert [r["operation"] for r in dry.plan["requests"]] == ["POST studies/", "POST studies/<id>/transition/"]
    assert "&quot;external_study_url&quot;" in response.content.decode()  # the plan is shown, escaped
    assert not PlatformCall.objects.exists() and not server.calls("POST", r"/api/v1/studies/")

    # Prolific for real (against the local server), clicked twice.
    for _ in range(2):
        client.post(url, {"action": "publish", "platform": "prolific"})
    publication = Publication.objects.get(platform="prolific", dry_run=False)
    assert publication.status == "published"

    # Links for a lab session are refused: a Prolific study recruits (and pays) on Prolific only, and
    # a worker who came by a link would be paid nowhere (``links._links_recruit_check``).
    response = client.post(url, {"action": "make_links", "count": "3", "label": "Lab"}, follow=True)
    assert "cannot be published on Participant links" in response.content.decode()
    assert ParticipantLink.objects.filter(study=study).count() == 0

    # Workers arrive and submit; sync, approve all (twice), reject one, bonus the good ones (twice).
    prolific_id = publication.prolific_study_id
    study.refresh_from_db()
    assert study.status == "open"
    subs = [server.add_submission(prolific_id, participant_id=f"p{i}") for i in range(3)]
    works = [submitted(study, platform="prolific", worker_id=f"p{i}", assignment_id=s["id"], task_id=prolific_id,
                       correct=i != 2) for i, s in enumerate(subs)]
    client.post(url, {"action": "sync"})
    from annotations.services.platforms.review import assignment_reject

    assignment_reject(user=researcher, study=study, assignment=works[2], feedback=REJECTION, category="FAILED_CHECK")
    shown = ",".join(str(w.pk) for w in works[:2])  # what the page's forms carry: its submitted tasks, its candidates
    for _ in range(2):
        client.post(url, {"action": "approve_all", "shown_submitted": shown})
        client.post(url, {"action": "bonus", "kind": "good_work", "amount": "0.50", "reason": "Consistently good work.",
                          "shown_good_work": shown})

    assert [Assignment.objects.get(pk=w.pk).status for w in works] == ["approved", "approved", "rejected"]
    assert Bonus.objects.filter(status="paid").count() == 2
    assert len(server.payments) == 2
    # The audit table: each money-moving call exactly once, with who did it.
    money = PlatformCall.objects.filter(amount__gt=0).order_by("id")
    assert [c.operation for c in money] == ["publish_study", "approve", "approve", "bonus", "bonus"]
    assert all(c.status == "confirmed" and c.user == researcher for c in money)
    assert sum(c.amount for c in money if c.operation == "bonus") == Decimal("1.00")
    page = client.get(url).content.decode()
    assert "Pay bonus" in page and "prolific:approve:" in page


def test_publish_study_command_dry_run_prints_the_requests(study):
    on_platform(study, "mturk")
    out = StringIO()
    call_command("publish_study", study.pk, "--platform", "mturk", "--dry-run", stdout=out)
    text = out.getvalue()
    assert "DRY RUN" in text and "create_hit" in text and "UniqueRequestToken" in text
    assert "14 tasks" in text and "33.60" in text
    assert not PlatformCall.objects.exists()


def test_publish_study_command_refuses_another_platform_than_the_studys(study):
    # The study runs on participant links: --platform confirms the study's platform, it never
    # publishes the study elsewhere (a dry run neither).
    for extra in ([], ["--dry-run"]):
        with pytest.raises(CommandError, match=r"cannot be published on Prolific: its platform \(the study's platform "
                                               r"field\) is Participant links"):
            call_command("publish_study", study.pk, "--platform", "prolific", *extra, stdout=StringIO())
    assert not Publication.objects.filter(study=study).exists()
    study.refresh_from_db()
    assert study.status == "draft"


def test_make_links_command_prints_urls(study):
    out = StringIO()
    call_command("make_links", study.pk, "--count", "2", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2 and all("/w/l/" in line for line in lines)
    out = StringIO()
    call_command("make_links", study.pk, "--open", "--completion-code", "CODE1", stdout=out)
    assert "/w/o/" in out.getvalue() and "CODE1" in out.getvalue()


def test_sync_study_command_reports(study, prolific):
    platform, server = prolific
    on_platform(study, "prolific")
    call_command("publish_study", study.pk, "--platform", "prolific", stdout=StringIO())
    publication = Publication.objects.get(dry_run=False)
    server.add_submission(publication.prolific_study_id, participant_id="ghost")
    out = StringIO()
    call_command("sync_study", study.pk, stdout=out)
    assert "1 on the platform" in out.getvalue() and "no_local_assignment" in out.getvalue()
