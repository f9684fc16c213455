"""Links recruit only for a study that runs on participant links and is not closed, as a publish on
links would (``common.publish_platform``, ``study_publish``): ``make_links``, the publish page's
link buttons and the link services refuse an MTurk or Prolific study (a worker who comes by a link
is never paid there) and a closed study, and make nothing. A link publication's own links (the
publish itself) are still made. And ``publish_study --max-assignments-per-hit`` takes a whole
number from 1 to 1000000 only (0 was dropped, a negative split the batch into HITs of one).

Regressions: ``make_links`` on an open MTurk study printed a /w/l/ link a worker redeemed, did and
submitted, with no HIT and no pay; on a closed study it printed links; ``--max-assignments-per-hit
0`` published HITs of 9, 9, 2 and ``-3`` twenty HITs of one."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotations.models import OpenLink, ParticipantLink, Publication
from annotations.services.links import links_generate, open_link_create
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from tests.annotations.platforms.conftest import on_platform, open_study

OTHER_PLATFORM = r"cannot be published on Participant links: its platform \(the study's platform field\) is {}"
LABELS = {"mturk": "Amazon Mechanical Turk", "prolific": "Prolific"}


def _links(study) -> int:
    return ParticipantLink.objects.filter(study=study).count() + OpenLink.objects.filter(study=study).count()


@pytest.mark.parametrize("opened", [False, True], ids=["draft", "open"])
@pytest.mark.parametrize("platform", ["mturk", "prolific"])
@pytest.mark.parametrize("way", [["--count", "1"], ["--open", "--completion-code", "CODE1"]], ids=["single", "open"])
def test_make_links_refuses_a_study_on_another_platform(study, platform, opened, way):
    on_platform(study, platform)
    if opened:
        open_study(study)
    out = StringIO()
    with pytest.raises(CommandError, match=OTHER_PLATFORM.format(LABELS[platform])):
        call_command("make_links", study.pk, *way, stdout=out)
    assert "/w/" not in out.getvalue() and _links(study) == 0


@pytest.mark.parametrize("way", [["--count", "3"], ["--open"]], ids=["single", "open"])
def test_make_links_refuses_a_closed_study(study, way):
    open_study(study)
    study_close(user=OPERATOR, study=study)
    out = StringIO()
    with pytest.raises(CommandError, match=r"study '.*' is closed: no links were made; copy it to run it again"):
        call_command("make_links", study.pk, *way, stdout=out)
    assert "/w/" not in out.getvalue() and _links(study) == 0


def test_the_link_services_refuse_as_the_command_does(study):
    on_platform(study, "mturk")
    open_study(study)
    for make in (lambda: links_generate(study=study, user=OPERATOR, n=2),
                 lambda: open_link_create(study=study, user=OPERATOR)):
        with pytest.raises(PlatformServiceError, match=OTHER_PLATFORM.format(LABELS["mturk"])):
            make()
    assert _links(study) == 0


def test_a_link_study_draft_or_open_still_gets_links_and_its_publish_its_own(study):
    assert len(links_generate(study=study, user=OPERATOR, n=2)) == 2  # a draft: links start tasks once open
    publication = study_publish(user=OPERATOR, study=study, platform_name="link")
    assert publication.status == Publication.Status.PUBLISHED
    assert ParticipantLink.objects.filter(publication=publication).count() == publication.n_tasks
    assert open_link_create(study=study, user=OPERATOR).active


@pytest.fixture
def researcher(client, django_user_model):
    user = django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used")
    client.force_login(user)
    return user


@pytest.mark.parametrize("data", [{"action": "make_links", "count": "3"}, {"action": "open_link"}],
                         ids=["make_links", "open_link"])
@pytest.mark.parametrize("case", ["mturk", "closed"])
def test_the_publish_page_says_why_and_makes_no_link(client, researcher, study, case, data):
    if case == "mturk":
        on_platform(study, "mturk")
        open_study(study)
        why = "cannot be published on Participant links"
    else:
        open_study(study)
        study_close(user=OPERATOR, study=study)
        why = "is closed: no links were made"
    page = reverse("admin:annotations_publication_publish", args=[study.pk])
    response = client.post(page, data)
    assert response.status_code == 302 and response["Location"] == page
    errors = [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "error"]
    assert len(errors) == 1 and errors[0].startswith("Nothing was done: study ") and why in errors[0], errors
    assert _links(study) == 0


@pytest.mark.parametrize("value", ["0", "-3"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "live"])
def test_publish_study_refuses_a_per_hit_size_below_one(mturk, study, value, dry_run):
    # MTurk treated as open on a stubbed client (``mturk``): the option itself is what is refused
    platform, stubber = mturk
    on_platform(study, "mturk")
    with pytest.raises(CommandError, match=rf"max_assignments_per_hit '{value}' is not a whole number from 1 to "
                                           r"1000000: nothing was sent"):
        call_command("publish_study", study.pk, "--max-assignments-per-hit", value,
                     *(["--dry-run"] if dry_run else []), stdout=StringIO())
    assert not Publication.objects.filter(study=study).exists()
    stubber.assert_no_pending_responses()  # nothing was asked of MTurk (an unexpected call fails)
    study.refresh_from_db()
    assert study.status == "draft"


@pytest.mark.parametrize("value", [0, -3, "0", "abc", "2.5", 1_000_001, True])
def test_study_publish_refuses_a_bad_per_hit_option(study, value):
    on_platform(study, "mturk")
    with pytest.raises(PlatformServiceError, match="max_assignments_per_hit .* is not a whole number from 1 to 1000000"):
        study_publish(user=OPERATOR, study=study, dry_run=True, options={"max_assignments_per_hit": value})
    assert not Publication.objects.filter(study=study).exists()


def test_publish_study_still_splits_by_a_good_per_hit_size(study):
    on_platform(study, "mturk")
    call_command("publish_study", study.pk, "--max-assignments-per-hit", "5", "--dry-run", stdout=StringIO())
    plan = Publication.objects.get(study=study, dry_run=True).plan
    assert [r["params"]["MaxAssignments"] for r in plan["requests"] if r["operation"] == "create_hit"] == [5, 5, 4]


def test_a_link_made_while_the_study_closes_is_stopped_by_the_close(study, monkeypatch):
    """A close stops the links, then recruits no more; a link made in between (another request,
    before the study is closed) is stopped too, by the close's second pass once the study is closed."""
    from annotations.services.platforms import close as close_module

    open_study(study)
    made = []
    first_close = close_module.links_close

    def links_close_then_a_link_is_made(*, study, user):
        result = first_close(study=study, user=user)
        if not made:  # the other request, between the close of the links and the study's
            made.extend(links_generate(study=study, user=OPERATOR, n=1))
            made.append(open_link_create(study=study, user=OPERATOR))
        return result

    monkeypatch.setattr(close_module, "links_close", links_close_then_a_link_is_made)
    study_close(user=OPERATOR, study=study)
    single, open_link = made
    single.refresh_from_db()
    open_link.refresh_from_db()
    assert single.revoked and not open_link.active


@pytest.mark.parametrize("platform", ["mturk", "prolific"])
def test_links_made_on_a_link_draft_start_no_task_once_it_moved_to_another_platform(study, platform):
    """Links made while the study was a participant-links draft (allowed: they start tasks once it
    opens) start none after its platform changed: their workers would be paid nowhere. Nothing is
    claimed, and the open link counts no one."""
    from django.test import Client

    from annotations.models import Assignment
    from tests.annotations.pages import consent

    (single,) = links_generate(study=study, user=OPERATOR, n=1)
    open_link = open_link_create(study=study, user=OPERATOR)
    on_platform(study, platform)
    open_study(study)
    for url in (f"/w/l/{single.token}/", f"/w/o/{open_link.token}/"):
        response = consent(Client(), url, identifier="lab-7")
        assert response.status_code != 302, url
        assert "no longer starts a task" in response.content.decode(), response.content.decode()[:800]
    assert not Assignment.objects.filter(study=study).exists()
    open_link.refresh_from_db()
    assert open_link.n_participants == 0
