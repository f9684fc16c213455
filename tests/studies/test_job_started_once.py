"""A job asked for again while the same principal's job with the same inputs is queued or running
is not started twice (``generation_job_create``): the admin's actions, the fine-tuning and Quark
services and the API all get the job already there (``already_queued``), so a double click or a
retried request never trains a checkpoint or spends a budget twice. The researcher's user row (the
operator's advisory lock, for a management command) is locked first, so two requests at once make
one job."""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from studies.models import GeneralizationQuestion, GenerationJob, Item, RationaleSource
from studies.selectors import generalization_questions_for_user
from studies.services.generation import jobs
from studies.services.generation.questions import drawn_question_demonstrations
from studies.services.generation.training import finetune_t5
from studies.services.studies import study_create, study_update
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.test_generator_rights import lab  # noqa: F401  (a dataset with a pool of train questions)
from tests.studies.lm.test_job_rights import _train_pool

pytestmark = pytest.mark.django_db


def test_a_finetuning_asked_for_twice_trains_once():
    ds = DatasetFactory(name="ds-twice")
    _train_pool(ds)
    first = finetune_t5(dataset=ds, mode="rationalizer", base_model="t5-small", output_name="ft-twice", run_now=False)
    again = finetune_t5(dataset=ds, mode="rationalizer", base_model="t5-small", output_name="ft-twice", run_now=False)
    assert (first.already_queued, again.already_queued, again.pk) == (False, True, first.pk)
    other = finetune_t5(dataset=ds, mode="rationalizer", base_model="t5-small", output_name="ft-twice", epochs=2,
                        run_now=False)
    assert not other.already_queued and GenerationJob.objects.count() == 2


def test_a_job_that_has_not_moved_for_the_stall_time_does_not_hold_up_the_same_request(settings):
    """A fine-tuning job whose message was lost stays queued until someone resumes it (beat resumes
    only the batched kinds): the same request then starts a new job instead of being told to wait."""
    ds = DatasetFactory(name="ds-stalled")
    _train_pool(ds)
    first = finetune_t5(dataset=ds, mode="rationalizer", base_model="t5-small", output_name="ft-stalled", run_now=False)
    GenerationJob.objects.filter(pk=first.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.RL_LM_STALL_SECONDS + 1))
    again = finetune_t5(dataset=ds, mode="rationalizer", base_model="t5-small", output_name="ft-stalled", run_now=False)
    assert not again.already_queued and again.pk != first.pk


def test_the_command_asked_twice_says_the_job_is_already_queued():
    ds = DatasetFactory(name="ds-command")
    _train_pool(ds)
    said = []
    for _ in range(2):
        out = StringIO()
        call_command("finetune_t5", "--dataset", "ds-command", "--base-model", "t5-small", "--queue", stdout=out)
        said.append(out.getvalue().strip())
    job = GenerationJob.objects.get()
    assert said == [f"queued fine-tuning job {job.pk} ({job.total} steps) on the lm queue",
                    f"Job {job.pk} with the same inputs is already queued; no second job was started. Cancel it "
                    "first to start it again."]


def test_the_admin_action_submitted_twice_queues_one_job(admin_client):
    ds = DatasetFactory(name="ds-admin")
    for _ in range(3):
        ItemFactory(dataset=ds, split="dev")
    source = RationaleSource.objects.create(name="t5-twice", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    url = reverse("admin:studies_rationalesource_changelist")
    body = {"action": "generate_rationales", "_selected_action": [source.pk], "apply": "1", "dataset": ds.pk,
            "split": "dev", "batch_size": 2}
    admin_client.post(url, body)
    page = admin_client.post(url, body, follow=True).content.decode()
    job = GenerationJob.objects.get()
    assert f"Job {job.pk} with the same inputs is already queued; no second job was started." in page


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("principal", ["researcher", "operator"])
def test_two_requests_at_once_make_one_job(monkeypatch, principal):
    """A researcher's requests wait on their user row; the operator's (management commands, no
    user) on the operator's advisory lock."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    ds = DatasetFactory(name="ds-race")
    for _ in range(2):
        ItemFactory(dataset=ds, split="dev")
    source = RationaleSource.objects.create(name="t5-race", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    user = (get_user_model().objects.create_user("racer", is_staff=True, is_superuser=True)
            if principal == "researcher" else None)
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)  # the job is not run: it stays queued
    looked = jobs._active_twin

    def slow_look(job, handler):  # the first request finds none and waits, the second looks meanwhile
        twin = looked(job, handler)
        if twin is None:
            time.sleep(1)
        return twin

    monkeypatch.setattr(jobs, "_active_twin", slow_look)
    made, go = [], threading.Barrier(2)

    def request():
        try:
            go.wait()
            made.append(jobs.generation_job_create(kind="rationales", source=source, dataset=ds, split="dev",
                                                   user=user))
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(job.already_queued for job in made) == [False, True]
    assert GenerationJob.objects.count() == 1


# --- question jobs: what their draw of demonstrations does not change ----------------------------

def _question_job(world, generator):
    """The operator's question job on ``generator`` for the dev items (queued, not run)."""
    return jobs.generation_job_create(kind="generalization_questions", generator=generator, dataset=world["dataset"],
                                      split="dev", user=None)


def _more_train_questions(dataset, n: int = 6) -> None:
    """Train questions a question job on another generator adds to the dataset's pool as it runs."""
    for i in range(n):
        item = ItemFactory(dataset=dataset, split="train", external_id=f"new{i}", question=f"Is new fact {i} true?")
        for qtype in ("rephrase", "similar", "counterfactual"):
            GeneralizationQuestion.objects.create(item=item, qtype=qtype, text=f"Is {qtype} of new fact {i} true?",
                                                  answer="yes", origin="other-generator")


def test_a_question_job_asked_again_after_its_pool_grew_is_the_job_already_queued(lab, monkeypatch):  # noqa: F811
    """Its demonstrations are drawn from the dataset's train questions, which question jobs add to as
    they run: the same request asked again draws others, and is still the same request."""
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)  # not run: it stays queued
    first = _question_job(lab, lab["ownerless"])
    _more_train_questions(lab["dataset"])
    redrawn, _note = drawn_question_demonstrations(lab["ownerless"], lab["dataset"], "rephrase")
    assert redrawn != first.params["demonstrations"]["rephrase"]  # the pool changed the draw
    again = _question_job(lab, lab["ownerless"])
    assert (again.already_queued, again.pk) == (True, first.pk)
    assert GenerationJob.objects.count() == 1


def test_a_question_job_asked_again_with_the_generators_own_demonstrations_edited_is_a_new_job(lab, monkeypatch):  # noqa: F811
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)
    generator = lab["ownerless"]
    generator.demonstrations = {"rephrase": [{"question": "Q?", "output": "Own?", "answer": "True", "context": "c"}] * 6}
    generator.save()
    first = _question_job(lab, generator)
    assert _question_job(lab, generator).already_queued  # unchanged: the same request
    generator.demonstrations = {"rephrase": [{"question": "Q?", "output": "Edited?", "answer": "True", "context": "c"}] * 6}
    generator.save()
    again = _question_job(lab, generator)
    assert not again.already_queued and again.pk != first.pk


def test_a_queued_question_job_whose_draw_holds_a_question_marked_invalid_since_is_not_the_one_asked_for(
        lab, monkeypatch):  # noqa: F811
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)
    first = _question_job(lab, lab["ownerless"])
    drawn = [d["output"] for d in first.params["demonstrations"]["rephrase"]]
    GeneralizationQuestion.objects.filter(text__in=drawn).update(
        validation_status=GeneralizationQuestion.Validation.INVALID)
    again = _question_job(lab, lab["ownerless"])
    assert not again.already_queued and again.pk != first.pk
    assert not set(drawn) & {d["output"] for d in again.params["demonstrations"]["rephrase"]}


def test_a_queued_question_job_whose_draw_its_researcher_may_no_longer_read_is_not_the_one_asked_for(
        lab, monkeypatch):  # noqa: F811
    """Alice's job drew from the train items of a study she owned then; she handed it to Bob since."""
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)
    alice, bob = lab["alice"], lab["bob"]
    every = study_create(name="alices-all-train", dataset=lab["dataset"], split="train", sources=[lab["source"]],
                         owner=alice, user=None, consent_text="ok")

    def ask():
        return jobs.generation_job_create(kind="generalization_questions", generator=lab["alices"],
                                          dataset=lab["dataset"], split="dev", user=alice)

    first = ask()
    assert ask().already_queued  # nothing changed: the same request
    study_update(study=every, user=None, owner=bob)
    readable = set(generalization_questions_for_user(user=alice).values_list("text", flat=True))
    assert {d["output"] for demos in first.params["demonstrations"].values() for d in demos} - readable
    again = ask()
    assert not again.already_queued and again.pk != first.pk


def test_a_queued_question_job_whose_draw_shows_its_own_items_is_not_the_one_asked_for_once_others_are_there(
        lab, monkeypatch):  # noqa: F811
    """A job on every train item drew among them (no six others were there); once another generator
    added questions on six more train items, a draw leaves the job's own items out, so the same
    request is a new job."""
    monkeypatch.setattr(jobs, "_enqueue", lambda job_id, chain: None)
    train = list(Item.objects.filter(dataset=lab["dataset"], split="train").order_by("pk").values_list("pk", flat=True))

    def ask():
        return jobs.generation_job_create(kind="generalization_questions", generator=lab["ownerless"],
                                          dataset=lab["dataset"], item_ids=train, user=None)

    first = ask()
    assert "of them show items of this job itself" in first.params["demonstrations_from"]["rephrase"]
    assert ask().already_queued  # nothing changed: the same request
    _more_train_questions(lab["dataset"])
    again = ask()
    assert not again.already_queued and again.pk != first.pk
    assert "of them show items of this job itself" not in again.params["demonstrations_from"]["rephrase"]


def test_a_question_job_without_a_note_of_where_its_demonstrations_came_from_compares_them_as_the_generators():
    """A job from before ``demonstrations_from`` was written prompts with its frozen demonstrations as
    its generator's (``generate``): they tell requests apart, as a generator's own do."""
    handler = jobs.HANDLERS["generalization_questions"]
    own = [{"question": "Q?", "output": "Own?", "answer": "True", "context": "c"}]
    drawn = [{"question": "Q?", "output": "Drawn?", "answer": "True", "context": "c"}]
    params = {"demonstrations": {"rephrase": own, "similar": drawn},
              "demonstrations_from": {"similar": "drawn from the train-split similar generalization questions of ds"}}
    assert handler.request_params(params)["demonstrations_own"] == {"rephrase": own}
