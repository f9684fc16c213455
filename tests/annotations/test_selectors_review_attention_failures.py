"""``study_attention_failures`` names, for each worker who failed an attention check, the tasks of
theirs that can still be rejected. Each check is asked once per worker
(``annotations.services.assignment``): a worker who failed both checks in a task they then
returned (a returned task cannot be rejected) gets no check in their next task, which they submit.
The warning on the progress, workers, worker and publish pages names that submitted task and links
to its worker's page, where the researcher rejects it with a reason (Dana's journey, step 7).
Workers answer through the worker pages; the researcher reads and posts the admin pages."""
from __future__ import annotations

import html
import io
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import Annotation, Assignment, Claim
from annotations.selectors.review import study_attention_failures
from scoring.services.bundle import bundle_import, bundle_stream
from studies.services.sharing import study_share
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import entry_url, form_fields, start, task_of
from tests.factories import staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def researcher(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used"))
    return client


def _answer_all(worker: Client, task: str, *, checks_right: bool) -> None:
    """Answer every question of the task on its pages with the item's gold answer; the attention
    checks right only when ``checks_right`` (the test reads the claim a page's form is for: the
    page shows a check as a question)."""
    for _ in range(50):
        page = worker.get(task).content.decode()
        if 'name="claim"' not in page:
            return
        fields = form_fields(page)
        claim = Claim.objects.select_related("attention_check", "unit__item").get(pk=fields["claim"])
        if claim.attention_check_id:
            right = claim.attention_check.correct_answer
            label = right if checks_right else next(c["label"] for c in claim.attention_check.choices
                                                    if c["label"] != right)
        else:
            label = claim.unit.item.gold_answer
        assert worker.post(task + "answer", {**fields, "answer": label}).status_code == 302


def _rejectable_links(page: str) -> dict[int, str]:
    """The warning's "can still be rejected" links: task id to the address it opens."""
    return {int(task): html.unescape(url) for url, task in
            re.findall(r'<a href="([^"]+)" class="attention-rejectable-task" data-task="(\d+)">', page)}


def _a_careless_and_a_careful_worker(study) -> tuple[Assignment, Assignment]:
    """A worker fails both checks in a task and returns it, then submits the next task (which has no
    check: each is asked once per worker); a careful worker submits. The careless worker's (returned,
    submitted) tasks."""
    worker = Client()
    first = start(worker, entry_url(study))
    _answer_all(worker, first, checks_right=False)
    assert worker.post(first + "leave").status_code == 302  # "Return this task"
    returned = task_of(first)
    assert returned.status == Assignment.Status.RETURNED
    checks = Annotation.objects.filter(claim__assignment=returned, step="attention")
    assert [payload["correct"] for payload in checks.values_list("payload", flat=True)] == [False, False]
    second = start(worker, entry_url(study))
    submitted = task_of(second)
    assert submitted.participant_id == returned.participant_id
    assert not Claim.objects.filter(assignment=submitted, attention_check__isnull=False).exists()
    _answer_all(worker, second, checks_right=True)
    assert worker.post(second + "submit").status_code == 302
    careful = Client()
    careful_task = start(careful, entry_url(study))
    _answer_all(careful, careful_task, checks_right=True)
    assert careful.post(careful_task + "submit").status_code == 302
    return returned, submitted


def _pages(study, participant_id: int) -> list[str]:
    """The pages that show the warning: progress, workers, the worker's page and the publish page."""
    return [reverse("admin:studies_study_progress", args=[study.pk]),
            reverse("admin:studies_study_workers", args=[study.pk]),
            reverse("admin:studies_study_worker", args=[study.pk, participant_id]),
            reverse("admin:annotations_publication_publish", args=[study.pk])]


def _study_with_two_checks():
    study = make_study(n_items=8, n_sources=1, units_per_task=4)
    AttentionCheckFactory(study=study)
    AttentionCheckFactory(study=study)
    return study


def test_the_warning_names_the_submitted_task_of_a_worker_who_failed_every_check_in_a_returned_one(researcher):
    # Given a worker who fails both checks in a task and returns it, then submits the next task
    # (which has no check: each is asked once per worker), and a careful worker who submits.
    study = _study_with_two_checks()
    returned, submitted = _a_careless_and_a_careful_worker(study)

    # Then the selector names the failing worker's submitted task, not the careful worker's.
    failures = study_attention_failures(study=study)
    assert (failures.tasks_failed, failures.workers_failed) == (1, 1)
    assert failures.rejectable == {submitted.participant_id: [submitted.pk]}

    # And every page's warning links it to the worker's page, the review link kept.
    worker_url = reverse("admin:studies_study_worker", args=[study.pk, submitted.participant_id])
    for url in _pages(study, submitted.participant_id):
        page = researcher.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert 'id="attention-review-link"' in text, url
        assert _rejectable_links(text) == {submitted.pk: worker_url + "#worker-actions"}, url

    # When Dana follows the link and rejects the task with a reason.
    page = researcher.get(worker_url).content.decode()
    assert f"Reject task {submitted.pk}" in page and f"Reject task {returned.pk}" not in page
    response = researcher.post(worker_url, {"assignment": submitted.pk, "action": "reject",
                                            "feedback": "You failed every attention check."})
    assert response.status_code == 302

    # Then it is rejected, and the warning says nothing is left to reject.
    submitted.refresh_from_db()
    assert submitted.status == Assignment.Status.REJECTED
    assert study_attention_failures(study=study).rejectable == {submitted.participant_id: []}
    text = researcher.get(reverse("admin:studies_study_workers", args=[study.pk])).content.decode()
    assert not _rejectable_links(text)
    assert "none is left to reject" in text


def test_the_warning_offers_no_rejection_to_a_reader_who_cannot_reject(researcher, django_user_model):
    """A reader with a view share has no Reject form on the worker page (``may_hand_out_links``: PAY,
    and not a study run elsewhere), so the warning promises no rejection to them: no "can still be
    rejected" and no link to the worker page's actions; the review link stays. A study's bundle copy
    (run elsewhere: the services refuse to reject its tasks) promises none even to its owner."""
    study = _study_with_two_checks()
    _returned, submitted = _a_careless_and_a_careful_worker(study)
    vera, reader = staff("vera", all_model_perms=False,
                         extra=("studies.view_study", "annotations.view_publication"))
    study_share(study=study, user=django_user_model.objects.get(username="dana"), with_user=vera)
    copy = bundle_import(file=io.BytesIO(b"".join(bundle_stream(study=study, user=None))), name="attention-copy",
                         filename="study.zip", owner=django_user_model.objects.get(username="dana"))
    copied_worker = Assignment.objects.get(study=copy, status=Assignment.Status.RETURNED).participant_id
    assert study_attention_failures(study=copy).rejectable == {copied_worker: [
        Assignment.objects.get(study=copy, participant_id=copied_worker, status=Assignment.Status.SUBMITTED).pk]}

    for client, pages in ((reader, _pages(study, submitted.participant_id)),
                          (researcher, _pages(copy, copied_worker))):
        for url in pages:
            page = client.get(url)
            assert page.status_code == 200, url
            text = page.content.decode()
            assert 'id="attention-review-link"' in text, url
            assert not _rejectable_links(text), url
            assert "can still be rejected" not in text and "left to reject" not in text, url
            assert 'id="attention-rejectable"' not in text, url
