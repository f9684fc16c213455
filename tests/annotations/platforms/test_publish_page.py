"""Issue 12, "Publish and pay without guessing": the publish page is the sequence estimate ->
publish -> sync -> review -> pay -> close, and says what each button will do and cost before it is
pressed; dry run is not ticked for participant links; links can be downloaded as CSV, each with
its state, and withdrawn one by one."""
from __future__ import annotations

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import OpenLink, ParticipantLink, Publication
from annotations.selectors.cost import study_cost_and_pay
from annotations.services.errors import StudyNotOpen
from annotations.services.participants import participant_link_redeem
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import study_approve_all
from annotations.services.platforms.sync import study_sync
from tests.annotations.pages import complete_task, start
from tests.annotations.platforms.conftest import on_platform, open_study, publish_on, submitted


@pytest.fixture
def researcher(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw"))
    return client


def _page(study, platform: str) -> str:
    return reverse("admin:annotations_publication_publish", args=[study.pk]) + f"?platform={platform}"


def _dry_run_box(html: str) -> str:
    return next(line for line in html.splitlines() if 'name="dry_run"' in line)


def test_the_page_is_the_sequence_and_says_what_each_button_does_and_costs(researcher, study):
    on_platform(study, "mturk")
    html = researcher.get(_page(study, "mturk")).content.decode()

    headings = ["1. Estimate", "2. Publish", "3. Sync", "4. Review", "5. Pay", "6. Close"]
    positions = [html.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "creates HITs for 14 tasks" in html and "<strong>33.60 USD</strong> in all" in html
    assert "nothing is paid" in html  # sync
    assert "Nothing is charged" in html  # close
    assert " checked>" in _dry_run_box(html)  # money moves: dry run first


def test_participant_links_move_no_money_and_are_not_a_dry_run_by_default(researcher, study):
    html = researcher.get(_page(study, "link")).content.decode()
    assert "<strong>No money moves</strong>" in html
    assert "checked" not in _dry_run_box(html)


def test_links_download_with_their_state_and_one_can_be_withdrawn(researcher, study):
    open_study(study)
    study_publish(user=OPERATOR, study=study, platform_name="link")
    unused, used, done, *_ = ParticipantLink.objects.filter(study=study).order_by("id")
    participant_link_redeem(link=used)
    worker = Client()  # the done link's task, started and submitted through its page (its own task)
    task = start(worker, f"/w/l/{done.token}/")
    complete_task(worker, task)
    assert worker.post(task + "submit").status_code == 302

    response = researcher.get(reverse("admin:annotations_publication_links_csv", args=[study.pk]))
    rows = {int(row["id"]): row for row in csv.DictReader(io.StringIO(response.content.decode()))}
    assert response["Content-Type"].startswith("text/csv")
    assert (rows[unused.pk]["state"], rows[used.pk]["state"], rows[done.pk]["state"]) == ("unused", "used", "submitted")
    assert rows[unused.pk]["url"].endswith(f"/w/l/{unused.token}/") and rows[done.pk]["completion_code"]
    html = researcher.get(_page(study, "link")).content.decode()
    assert "12 unused, 1 used, 1 submitted" in html

    researcher.post(reverse("admin:annotations_publication_publish", args=[study.pk]),
                    {"action": "revoke_link", "link_id": unused.pk}, follow=True)

    unused.refresh_from_db()
    assert unused.revoked
    with pytest.raises(StudyNotOpen):
        participant_link_redeem(link=unused)
    assert "11 unused, 1 used, 1 submitted,\n      0 approved, 0 rejected,\n      1 withdrawn" in researcher.get(_page(study, "link")).content.decode()


@pytest.mark.parametrize("value", ["99999999999999999999", "2147483648", "0", "-3"])
def test_an_open_link_limit_out_of_range_is_an_error_on_the_page(researcher, study, value):
    """Issue 20 item 13: a limit over what the column stores raised an uncaught ValidationError (500)."""
    open_study(study)
    response = researcher.post(reverse("admin:annotations_publication_publish", args=[study.pk]),
                               {"action": "open_link", "max_participants": value}, follow=True)
    assert response.status_code == 200
    assert "places (max_participants) must be between 1 and 2147483647" in response.content.decode()
    assert not OpenLink.objects.filter(study=study).exists()


def test_another_platforms_quote_offers_no_publish_there(researcher, study):
    # The page prices Prolific for comparison; its publish card still names the study's own
    # platform and offers no button that would publish the link study on Prolific.
    html = researcher.get(_page(study, "prolific")).content.decode()

    assert "1. Estimate (prolific)" in html and "37.33" in html  # the quote
    publish_card = html[html.index('id="publish"'):html.index('id="sync"')]
    assert "2. Publish on link" in publish_card and 'id="publish-elsewhere"' in publish_card
    assert "change its platform on the" in publish_card
    assert 'name="action" value="publish"' not in publish_card


def test_a_publish_posted_for_another_platform_is_refused_with_the_reason(researcher, study, prolific):
    # A form posted for Prolific (a page shown before the draft's platform changed, or a forged
    # one) is answered as every caller is: nothing is published, on either platform.
    platform, server = prolific
    url = reverse("admin:annotations_publication_publish", args=[study.pk])

    response = researcher.post(url, {"action": "publish", "platform": "prolific"}, follow=True)

    html = response.content.decode()
    assert "Nothing was done: study" in html and "cannot be published on Prolific" in html
    assert "platform field) is Participant links" in html
    assert not Publication.objects.filter(study=study).exists() and server.calls("POST", r"/api/v1/studies/") == []
    study.refresh_from_db()
    assert study.status == "draft"


def test_approve_all_is_priced_without_the_work_on_hold_it_leaves_out(researcher, study, prolific):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    real = server.add_submission(publication.prolific_study_id, participant_id="p_real")
    # p_real's session id presented with a fabricated participant id: sync holds that work.
    submitted(study, platform="prolific", worker_id="p_fabricated_1", assignment_id=real["id"],
              task_id=publication.prolific_study_id)
    honest = server.add_submission(publication.prolific_study_id, participant_id="p_honest")
    submitted(study, platform="prolific", worker_id="p_honest", assignment_id=honest["id"],
              task_id=publication.prolific_study_id)
    study_sync(study=study)
    one, two = (study_cost_and_pay(study=study, n_tasks=n).estimate for n in (1, 2))

    html = researcher.get(_page(study, "prolific")).content.decode()

    approve = next(line for line in html.splitlines() if "their rewards:" in line)
    assert f"<strong>{one.total} {one.currency}</strong>" in approve and str(two.total) not in approve, approve
    assert study_approve_all(user=OPERATOR, study=study)["approved"] == 1  # what it pays: one task's reward
