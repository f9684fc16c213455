"""Single-person links (``/w/l/``) and open links (``/w/o/``) through the worker pages, and the one
redemption service they use (issue 11 bug 4; issue 12: a used link shows its code only to the
browser that did the task)."""
from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from annotations.models import (
    Assignment,
    ConsentReceipt,
    OpenLink,
    Participant,
    ParticipantLink,
    PlatformCall,
    Publication,
)
from annotations.services.errors import StudyNotOpen
from annotations.services.links import links_close, links_generate, open_link_create
from annotations.services.participants import participant_link_redeem
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform, StudyShare
from studies.services.sharing import study_share
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, consent, start
from tests.annotations.platforms.conftest import prolific, prolific_server  # noqa: F401
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(db):
    return make_study(n_items=6, n_sources=1, units_per_task=2)


def link_url(link) -> str:
    return f"/w/{'o' if isinstance(link, OpenLink) else 'l'}/{link.token}/"


def test_redeeming_a_single_person_link_always_gives_its_one_participant(study):
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    first = participant_link_redeem(link=link)
    again = participant_link_redeem(link=ParticipantLink.objects.get(pk=link.pk))
    assert first.pk == again.pk and first.platform == "link"
    assert ParticipantLink.objects.get(pk=link.pk).redeemed_at is not None


def test_a_withdrawn_link_cannot_be_redeemed(study):
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    links_close(study=study, user=OPERATOR)
    with pytest.raises(StudyNotOpen):
        participant_link_redeem(link=link)


def test_a_single_person_link_through_the_pages(study):
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    browser = Client()
    task = start(browser, link_url(link))
    assignment = Assignment.objects.select_related("participant").get()
    assert assignment.participant == ParticipantLink.objects.get(pk=link.pk).participant
    assert assignment.completion_code == link.completion_code
    assert browser.get(link_url(link))["Location"] == task  # the same browser resumes
    phone = Client()
    assert phone.get(link_url(link))["Location"] == task  # the link is its holder's key while the task runs
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    assert link.completion_code in browser.get(browser.get(link_url(link))["Location"]).content.decode()


def test_a_used_link_opened_in_another_browser_does_not_show_its_completion_code_again(study):
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    browser = Client()
    task = start(browser, link_url(link))
    complete_task(browser, task)
    browser.post(task + "submit")
    for method in ("get", "post"):
        response = getattr(Client(), method)(link_url(link), {"consent": "yes"} if method == "post" else {})
        page = response.content.decode()
        assert response.status_code == 403 and "already used" in page
        assert link.completion_code not in page and task not in page
    assert Assignment.objects.count() == 1


def test_withdrawn_unknown_and_malformed_links(client, study):
    link = links_generate(study=study, user=OPERATOR, n=2)[0]
    links_close(study=study, user=OPERATOR)
    response = client.get(link_url(link))
    assert response.status_code == 410 and "withdrawn" in response.content.decode()
    for token in ("x" * 43, "a/b", "a" * 65, "é" * 10):
        assert client.get(f"/w/l/{token}/").status_code == 404
        assert client.get(f"/w/o/{token}/").status_code == 404


def test_an_open_link_takes_new_browsers_up_to_its_capacity(study):
    link = open_link_create(study=study, user=OPERATOR, completion_code="LAB-2026", max_participants=2)
    first, second = Client(), Client()
    task = start(first, link_url(link))
    assert first.get(link_url(link))["Location"] == task  # the same browser resumes, not counted again
    start(second, link_url(link))
    full = consent(Client(), link_url(link))
    assert full.status_code == 403 and "full" in full.content.decode()
    assert OpenLink.objects.get(pk=link.pk).n_participants == 2
    assert Participant.objects.count() == 2
    assert set(Assignment.objects.values_list("completion_code", flat=True)) == {"LAB-2026"}


def test_a_worker_coming_back_through_an_open_link_for_another_task_is_not_counted_again(study):
    link = open_link_create(study=study, user=OPERATOR, max_participants=1)
    browser = Client()
    task = start(browser, link_url(link))
    complete_task(browser, task)
    browser.post(task + "submit")
    assert start(browser, link_url(link)) != task
    assert OpenLink.objects.get(pk=link.pk).n_participants == 1
    assert Participant.objects.count() == 1


def test_a_closed_open_link_takes_nobody(client, study):
    link = open_link_create(study=study, user=OPERATOR)
    links_close(study=study, user=OPERATOR)
    assert client.get(link_url(link)).status_code == 403


def test_the_study_page_warns_when_a_study_takes_anonymous_open_link_workers(admin_client, study):
    page = reverse("admin:studies_study_change", args=[study.pk])
    assert "takes anonymous workers through its plain study link" in admin_client.get(page).content.decode()
    links_generate(study=study, user=OPERATOR, n=2)  # single-person links only: everyone is known
    assert "anonymous workers" not in admin_client.get(page).content.decode()
    open_link_create(study=study, user=OPERATOR)
    assert "anonymous workers through an open link" in admin_client.get(page).content.decode()
    on_prolific = make_study(platform=Platform.PROLIFIC)
    assert "anonymous" not in admin_client.get(reverse("admin:studies_study_change",
                                                       args=[on_prolific.pk])).content.decode()


# --- one browser, several single-person links of one study (issue 22 item 6) -----------------------

def _keys(task_url: str) -> set[str]:
    token = task_url.rstrip("/").rsplit("/", 1)[-1]
    return set(Assignment.objects.get(token=token).claims.filter(unit__isnull=False)
               .values_list("question_key", flat=True))


def _finish(browser, task: str) -> None:
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302


@pytest.fixture
def three_questions(db):
    # 3 questions, 2 per task: a second worker gets at least one question the first one saw.
    return make_study(n_items=3, n_sources=1, units_per_task=2)


def test_a_browser_opening_a_second_link_gets_no_question_it_has_seen_and_is_one_worker(three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    task1 = start(browser, link_url(first))
    _finish(browser, task1)
    task2 = start(browser, link_url(second))
    assert task2 != task1
    assert _keys(task1) and _keys(task2) and not _keys(task1) & _keys(task2)
    links = {link.pk: link for link in ParticipantLink.objects.filter(study=three_questions)}
    assert links[first.pk].participant_id == links[second.pk].participant_id  # one worker
    assert Participant.objects.count() == 1
    tasks = {a.participant_link_id: a for a in Assignment.objects.all()}
    # Each link keeps its own task and completion code (each is one paid completion).
    assert set(tasks) == {first.pk, second.pk}
    assert tasks[second.pk].completion_code == second.completion_code
    assert tasks[first.pk].completion_code == first.completion_code


def test_a_second_browser_opening_the_second_link_is_a_new_worker(three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    _finish(browser, start(browser, link_url(first)))
    start(Client(), link_url(second))
    links = {link.pk: link for link in ParticipantLink.objects.filter(study=three_questions)}
    assert links[first.pk].participant_id != links[second.pk].participant_id
    assert Participant.objects.count() == 2


def test_each_link_of_one_worker_shows_its_own_task_in_the_links_csv(admin_client, three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    task1 = start(browser, link_url(first))
    _finish(browser, task1)
    task2 = start(browser, link_url(second))
    rows = list(csv.DictReader(io.StringIO(admin_client.get(
        reverse("admin:annotations_publication_links_csv", args=[three_questions.pk])).content.decode())))
    by_id = {int(row["id"]): row for row in rows}
    tasks = {a.token: a for a in Assignment.objects.all()}
    assert by_id[first.pk]["task"] == str(tasks[task1.rstrip("/").rsplit("/", 1)[-1]].pk)
    assert by_id[first.pk]["state"] == "submitted"
    assert by_id[second.pk]["task"] == str(tasks[task2.rstrip("/").rsplit("/", 1)[-1]].pk)
    assert by_id[second.pk]["state"] == "used"
    assert by_id[first.pk]["worker"] == by_id[second.pk]["worker"] != ""


def test_a_second_link_opened_while_the_first_task_runs_is_refused_and_stays_unused(three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    task1 = start(browser, link_url(first))
    refused = consent(browser, link_url(second))
    page = refused.content.decode()
    # The cookie of the first link's task never opens it through a link it was not started from.
    assert refused.status_code == 409 and "another task of this study in progress" in page and task1 not in page
    assert ParticipantLink.objects.get(pk=second.pk).participant_id is None
    assert Assignment.objects.count() == 1
    _finish(browser, task1)
    task2 = start(browser, link_url(second))
    assert not _keys(task1) & _keys(task2)


def test_a_browser_cookie_does_not_take_over_a_link_another_browser_used(three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    mine, theirs = Client(), Client()
    _finish(mine, start(mine, link_url(first)))
    _finish(theirs, start(theirs, link_url(second)))
    owner = ParticipantLink.objects.get(pk=second.pk).participant_id
    # The used link's finished task is not shown to another browser, and its participant stays.
    for method in ("get", "post"):
        assert getattr(mine, method)(link_url(second), {"consent": "yes"} if method == "post" else {}).status_code == 403
    assert ParticipantLink.objects.get(pk=second.pk).participant_id == owner
    assert owner != ParticipantLink.objects.get(pk=first.pk).participant_id


def test_a_typed_identifier_is_not_proof_enough_to_be_recognised_on_a_single_person_link(three_questions):
    """Anyone may type someone's identifier on an open link: a browser that did so is not that
    person on a single-person link."""
    link = links_generate(study=three_questions, user=OPERATOR, n=1)[0]
    shared = open_link_create(study=three_questions, user=OPERATOR)
    browser = Client()
    _finish(browser, start(browser, link_url(shared), identifier="victim@lab.example"))
    start(browser, link_url(link))
    victim = Assignment.objects.exclude(participant_link=link).get().participant_id
    assert ParticipantLink.objects.get(pk=link.pk).participant_id != victim


def test_an_anonymous_open_link_worker_is_recognised_on_a_single_person_link(three_questions):
    link = links_generate(study=three_questions, user=OPERATOR, n=1)[0]
    shared = open_link_create(study=three_questions, user=OPERATOR)
    browser = Client()
    task1 = start(browser, link_url(shared))
    _finish(browser, task1)
    task2 = start(browser, link_url(link))
    assert not _keys(task1) & _keys(task2)
    assert Participant.objects.count() == 1


def test_the_worker_page_lists_every_link_the_recognised_worker_used(admin_client, three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    _finish(browser, start(browser, link_url(first)))
    start(browser, link_url(second))
    worker = ParticipantLink.objects.get(pk=first.pk).participant_id
    page = admin_client.get(reverse("admin:studies_study_worker", args=[three_questions.pk, worker])).content.decode()
    assert "Participant links" in page
    assert first.completion_code in page and second.completion_code in page


def test_the_first_links_code_stays_with_the_browser_that_went_on_to_a_second_link(three_questions):
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    task1 = start(browser, link_url(first))
    _finish(browser, task1)
    task2 = start(browser, link_url(second))
    assert browser.get(link_url(first))["Location"] == task1  # its own task's done page, not the second task
    assert first.completion_code in browser.get(task1).content.decode()
    assert browser.get(link_url(second))["Location"] == task2
    stranger = Client().get(link_url(first))
    assert stranger.status_code == 403 and first.completion_code not in stranger.content.decode()


# --- a withdrawn participant's browser on their next single-person link -----------------------------

def _withdraw(study, participant) -> None:
    participant_withdraw(user=OPERATOR, study=study,
                         pseudonym=worker_pseudonym(participant.platform, participant.external_id))


def test_a_withdrawn_participants_browser_is_refused_on_their_next_link_and_it_stays_unused(three_questions):
    """The withdrawal deletes the task the browser's cookie names, so the cookie proves no task; it
    still names the participant who withdrew, and the next link refuses them as the open link does
    (not a new participant with a new task)."""
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    shared = open_link_create(study=three_questions, user=OPERATOR)
    browser = Client()
    _finish(browser, start(browser, link_url(first)))
    _withdraw(three_questions, Assignment.objects.get(participant_link=first).participant)
    refused = consent(browser, link_url(second))
    assert refused.status_code == 403, refused.status_code
    assert "This study is not available to your account." in refused.content.decode()
    assert not Assignment.objects.filter(study=three_questions).exists()
    unused = ParticipantLink.objects.get(pk=second.pk)
    assert unused.participant_id is None and unused.redeemed_at is None
    assert not ConsentReceipt.objects.filter(study=three_questions).exists()
    # The same refusal, word for word, as the open link gives that browser.
    elsewhere = consent(browser, link_url(shared))
    assert elsewhere.status_code == 403
    assert "This study is not available to your account." in elsewhere.content.decode()


def test_a_withdrawn_anonymous_open_link_workers_browser_is_refused_on_a_single_person_link(three_questions):
    link = links_generate(study=three_questions, user=OPERATOR, n=1)[0]
    shared = open_link_create(study=three_questions, user=OPERATOR)
    browser = Client()
    _finish(browser, start(browser, link_url(shared)))
    _withdraw(three_questions, Assignment.objects.get().participant)
    assert consent(browser, link_url(link)).status_code == 403
    assert not Assignment.objects.exists()
    assert ParticipantLink.objects.get(pk=link.pk).redeemed_at is None


def test_another_browser_still_takes_a_link_left_unused_after_a_withdrawal(three_questions):
    """Nothing ties an unused link to the participant it was handed to, so the withdrawal leaves
    it open: a browser that proves nothing is a new participant on it, as before."""
    first, second = links_generate(study=three_questions, user=OPERATOR, n=2)
    browser = Client()
    _finish(browser, start(browser, link_url(first)))
    withdrawn = Assignment.objects.get(participant_link=first).participant
    _withdraw(three_questions, withdrawn)
    start(Client(), link_url(second))
    task = Assignment.objects.get(participant_link=second)
    assert task.status == Assignment.Status.ACTIVE and task.participant_id != withdrawn.pk


def test_a_browser_whose_participant_did_not_withdraw_is_still_recognised_after_anothers_withdrawal(three_questions):
    """The check refuses only a participant who withdrew: a browser whose participant did not
    goes on as that participant on its next link, as before."""
    first, second, third = links_generate(study=three_questions, user=OPERATOR, n=3)
    leaving, staying = Client(), Client()
    _finish(leaving, start(leaving, link_url(first)))
    _finish(staying, start(staying, link_url(second)))
    _withdraw(three_questions, Assignment.objects.get(participant_link=first).participant)
    start(staying, link_url(third))
    assert (ParticipantLink.objects.get(pk=third.pk).participant_id
            == ParticipantLink.objects.get(pk=second.pk).participant_id)


# --- who is shown the links' keys: addresses and completion codes need PAY on the study ----------

@pytest.fixture
def keyed_study(db):
    """Alice's study with two single-person links (the first worked and submitted through its
    address, so its worker has a page) and an open link; Vic, Carl and Pat hold VIEW, CHANGE and
    PAY shares of it. Every one of them has the model permissions, ``studies.pay_workers``
    included: only the share's level differs."""
    alice, alice_client = staff_client("alice")
    study = make_study(n_items=3, n_sources=1, units_per_task=2, owner=alice)
    first, second = links_generate(study=study, user=alice, n=2)
    open_link = open_link_create(study=study, user=alice, completion_code="OPEN-CODE-77")
    browser = Client()
    _finish(browser, start(browser, link_url(first)))
    clients = {"owner": alice_client}
    for name, level in (("vic", StudyShare.Level.VIEW), ("carl", StudyShare.Level.CHANGE),
                        ("pat", StudyShare.Level.PAY)):
        user, client = staff_client(name)
        study_share(study=study, user=alice, with_user=user, level=level)
        clients[level] = client
    worker = ParticipantLink.objects.get(pk=first.pk).participant_id
    return {"study": study, "links": [first, second], "open": open_link, "clients": clients, "worker": worker}


def _keys_of(keyed: dict) -> list[str]:
    """Every link's token (its address's key) and completion code."""
    first, second = keyed["links"]
    return [first.token, first.completion_code, second.token, second.completion_code,
            keyed["open"].token, keyed["open"].completion_code]


def _pages(keyed: dict) -> dict[str, str]:
    study = keyed["study"]
    return {
        "publish": reverse("admin:annotations_publication_publish", args=[study.pk]),
        "links.csv": reverse("admin:annotations_publication_links_csv", args=[study.pk]),
        "worker": reverse("admin:studies_study_worker", args=[study.pk, keyed["worker"]]),
        "link list": "/admin/annotations/participantlink/",
        "link page": f"/admin/annotations/participantlink/{keyed['links'][0].pk}/change/",
        "open link list": "/admin/annotations/openlink/",
        "open link page": f"/admin/annotations/openlink/{keyed['open'].pk}/change/",
    }


@pytest.mark.parametrize("level", [StudyShare.Level.VIEW, StudyShare.Level.CHANGE])
def test_a_reader_without_pay_is_shown_no_link_address_or_completion_code(keyed_study, level):
    client = keyed_study["clients"][level]
    shown = set()
    for page, url in _pages(keyed_study).items():
        response = client.get(url)
        assert response.status_code == 200, page
        # An unused address makes its opener the participant; a code is what a worker is paid against.
        shown |= {page for key in _keys_of(keyed_study) if key in response.content.decode()}
    assert sorted(shown) == [], f"{level} share: these pages show a link's address or completion code"
    # The links themselves are still listed: label, state, task and worker, as the page says.
    publish = client.get(_pages(keyed_study)["publish"]).content.decode()
    assert "shown to those who may pay this study's workers" in publish
    assert f'id="link-{keyed_study["links"][0].pk}"' in publish


@pytest.mark.parametrize("level", [StudyShare.Level.VIEW, StudyShare.Level.CHANGE])
def test_the_links_csv_keeps_its_columns_with_the_address_and_code_empty_without_pay(keyed_study, level):
    client = keyed_study["clients"][level]
    rows = list(csv.DictReader(io.StringIO(client.get(_pages(keyed_study)["links.csv"]).content.decode())))
    first = keyed_study["links"][0]
    assert {int(row["id"]) for row in rows} == {link.pk for link in keyed_study["links"]}
    assert all(row["url"] == "" and row["completion_code"] == "" for row in rows)
    worked = next(row for row in rows if int(row["id"]) == first.pk)
    assert worked["state"] == "submitted" and worked["task"] and worked["worker"]


@pytest.mark.parametrize("who", ["owner", StudyShare.Level.PAY])
def test_those_who_may_pay_the_workers_still_see_every_address_and_code(keyed_study, who):
    client, (first, second), open_link = keyed_study["clients"][who], keyed_study["links"], keyed_study["open"]
    pages = _pages(keyed_study)
    publish = client.get(pages["publish"]).content.decode()
    for key in _keys_of(keyed_study):
        assert key in publish, key
    rows = {int(row["id"]): row for row in csv.DictReader(io.StringIO(client.get(pages["links.csv"]).content.decode()))}
    assert rows[first.pk]["completion_code"] == first.completion_code and first.token in rows[first.pk]["url"]
    assert rows[second.pk]["completion_code"] == second.completion_code and second.token in rows[second.pk]["url"]
    assert first.completion_code in client.get(pages["worker"]).content.decode()
    assert first.token in client.get(pages["link page"]).content.decode()
    assert open_link.completion_code in client.get(pages["open link list"]).content.decode()



# --- the task and publication admins: a task's token (its address) and codes need PAY too -------

@pytest.fixture
def keyed_task(keyed_study):
    """``keyed_study``'s worked task (its token is its address ``/w/<token>/``; its completion
    code is the one its link handed out) and the study's publication, published by Alice on
    the study's platform (the publish page's service), which carries a completion code and a plan."""
    study = keyed_study["study"]
    task = Assignment.objects.get(study=study, participant_id=keyed_study["worker"])
    publication = study_publish(user=study.owner, study=study, platform_name=study.platform,
                                options={"link_mode": "single"})
    assert task.token and task.completion_code and publication.completion_code
    return {**keyed_study, "task": task, "publication": Publication.objects.get(pk=publication.pk)}


def _task_pages(keyed: dict) -> dict[str, str]:
    task, publication = keyed["task"], keyed["publication"]
    return {
        "task list": "/admin/annotations/assignment/",
        "task page": f"/admin/annotations/assignment/{task.pk}/change/",
        "publication list": "/admin/annotations/publication/",
        "publication page": f"/admin/annotations/publication/{publication.pk}/change/",
    }


@pytest.mark.parametrize("level", [StudyShare.Level.VIEW, StudyShare.Level.CHANGE])
def test_a_reader_without_pay_is_shown_no_task_token_or_code_nor_a_publications_code_and_plan(keyed_task, level):
    client, task, publication = keyed_task["clients"][level], keyed_task["task"], keyed_task["publication"]
    keys = [task.token, task.completion_code, publication.completion_code]
    shown = set()
    for page, url in _task_pages(keyed_task).items():
        response = client.get(url)
        assert response.status_code == 200, page
        shown |= {page for key in keys if key in response.content.decode()}
    assert sorted(shown) == [], f"{level} share: these pages show a task's token or a completion code"
    # The task and the publication are still listed and open, without those fields.
    task_page = client.get(_task_pages(keyed_task)["task page"]).content.decode()
    assert "field-status" in task_page and "field-token" not in task_page and "field-completion_code" not in task_page
    listed = client.get(_task_pages(keyed_task)["task list"]).content.decode()
    assert "shown to those who may pay this study&#x27;s workers" in listed
    publication_page = client.get(_task_pages(keyed_task)["publication page"]).content.decode()
    assert "field-status" in publication_page
    assert "field-plan" not in publication_page and "field-completion_code" not in publication_page


@pytest.mark.parametrize("level", [StudyShare.Level.VIEW, StudyShare.Level.CHANGE])
def test_a_reader_without_pay_cannot_find_a_task_by_its_completion_code(keyed_task, level):
    client, task = keyed_task["clients"][level], keyed_task["task"]
    # A partial match would spell a code out a few characters at a time.
    for term in (task.completion_code, task.completion_code[1:7]):
        listed = client.get("/admin/annotations/assignment/", {"q": term})
        assert listed.status_code == 200
        assert f"/admin/annotations/assignment/{task.pk}/change/" not in listed.content.decode(), term


@pytest.mark.parametrize("who", ["owner", StudyShare.Level.PAY])
def test_those_who_may_pay_the_workers_still_see_and_search_the_tasks_token_and_codes(keyed_task, who):
    client, task, publication = keyed_task["clients"][who], keyed_task["task"], keyed_task["publication"]
    pages = _task_pages(keyed_task)
    task_page = client.get(pages["task page"]).content.decode()
    assert task.token in task_page and task.completion_code in task_page
    assert task.completion_code in client.get(pages["task list"]).content.decode()
    found = client.get(pages["task list"], {"q": task.completion_code}).content.decode()
    assert f"/admin/annotations/assignment/{task.pk}/change/" in found
    publication_page = client.get(pages["publication page"]).content.decode()
    assert publication.completion_code in publication_page and "field-plan" in publication_page


# --- platform calls and list filters: the same keys, by the same rule ----------------------------

def test_a_prolific_publish_calls_code_is_shown_only_to_those_who_may_pay(prolific):  # noqa: F811
    """The call that created the Prolific study carries its completion code (``completion_codes``):
    a VIEW share holding ``studies.view_raw_worker_ids`` (which shows the calls' bodies) still does
    not read it; the owner does."""
    alice, alice_client = staff_client("alice")
    study = make_study(n_items=3, n_sources=1, units_per_task=2, owner=alice, platform="prolific")
    publication = study_publish(user=alice, study=study, platform_name="prolific")
    vic, vic_client = staff_client("vic")
    for user in (alice, vic):
        user.user_permissions.add(Permission.objects.get(codename="view_raw_worker_ids"))
    study_share(study=study, user=alice, with_user=vic, level=StudyShare.Level.VIEW)
    calls = [call for call in PlatformCall.objects.filter(study=study) if publication.completion_code in str(call.request_summary)]
    assert calls, "the publish call records the completion code it sent"
    for call in calls:
        url = f"/admin/annotations/platformcall/{call.pk}/change/"
        assert publication.completion_code in alice_client.get(url).content.decode()
        page = vic_client.get(url)
        assert page.status_code == 200 and publication.completion_code not in page.content.decode()


@pytest.mark.parametrize("level", [StudyShare.Level.VIEW, StudyShare.Level.CHANGE])
def test_a_list_filter_in_the_address_names_a_key_only_for_who_may_see_them(keyed_task, level):
    """``?completion_code=<code>`` would find a task by its code where the search does not: refused
    (a 400 saying why) to a reader who sees a study whose keys they may not be shown, on the task
    and link lists alike; the owner, shown every key of the studies she sees, still filters."""
    task = keyed_task["task"]
    first = keyed_task["links"][0]
    owner = keyed_task["clients"]["owner"]
    assert owner.get("/admin/annotations/assignment/", {"completion_code": task.completion_code}).status_code == 200
    for client in (keyed_task["clients"][level],):
        for url, lookup in (("/admin/annotations/assignment/", {"completion_code": task.completion_code}),
                            ("/admin/annotations/assignment/", {"token": task.token}),
                            ("/admin/annotations/assignment/", {"completion_code__in": task.completion_code}),
                            ("/admin/annotations/participantlink/", {"token": first.token})):
            response = client.get(url, lookup)
            assert response.status_code == 400, (url, lookup)
