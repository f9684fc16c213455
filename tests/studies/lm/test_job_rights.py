"""Who may cancel and resume an LM job: the check sits in the services, so the admin's actions (and
any other caller) get the same answer. A researcher acts on the jobs they started while they may
start jobs; another researcher's job needs ``studies.change_generationjob``."""
import pytest
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError
from django.test import Client
from django.urls import reverse

from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    Item,
    QuestionGenerator,
    Rationale,
    RationaleSource,
    Study,
)
from studies.services.generation import (
    GenerationError,
    generation_job_cancel,
    generation_job_create,
    generation_job_run,
)
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion

pytestmark = pytest.mark.django_db
# A researcher who starts jobs reads the sources, generators, datasets and items they run on, and the
# train questions a generator's job draws its demonstrations from (sources_for_user, ...).
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.view_dataset", "studies.view_item",
              "studies.view_rationalesource", "studies.view_questiongenerator", "studies.view_generalizationquestion")


def staff(name, *perms):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, *perms)


@pytest.fixture
def world():
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(3):
        ItemFactory(dataset=dataset, split="dev")
    source = RationaleSource.objects.create(name="t5-local", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    alice, bob = staff("alice", *RESEARCHER), staff("bob", *RESEARCHER)

    def job_of(user, **kw):
        return generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=user,
                                     enqueue=False, **kw)

    return alice, bob, job_of


def _post_action(user, action, job):
    client = Client()
    client.force_login(user)
    return client.post(reverse("admin:studies_generationjob_changelist"),
                       {"action": action, "_selected_action": [job.pk]}, follow=True)


def _messages(page) -> list[str]:
    return [str(m) for m in page.context["messages"]]


def test_a_researcher_cannot_cancel_another_researchers_job_through_the_admin(world):
    alice, bob, job_of = world
    bobs = job_of(bob)
    page = _post_action(alice, "cancel_jobs", bobs)
    bobs.refresh_from_db()
    assert (bobs.status, bobs.cancel_requested) == ("queued", False)
    assert f"job {bobs.pk}: not found or not yours to cancel" in _messages(page)


def test_a_researcher_cannot_resume_another_researchers_job_through_the_admin(world):
    alice, bob, job_of = world
    bobs = job_of(bob)
    generation_job_cancel(job=bobs, user=bob)
    page = _post_action(alice, "resume_jobs", bobs)
    bobs.refresh_from_db()
    assert bobs.status == "cancelled"
    assert f"job {bobs.pk}: not found or not yours to resume" in _messages(page)


def test_a_researcher_cancels_and_resumes_their_own_job_through_the_admin(world):
    alice, _, job_of = world
    mine = job_of(alice)
    _post_action(alice, "cancel_jobs", mine)
    mine.refresh_from_db()
    assert mine.status == "cancelled"
    _post_action(alice, "resume_jobs", mine)
    mine.refresh_from_db()
    assert mine.status == "queued"


def test_the_service_refuses_without_the_right_to_start_jobs_and_allows_the_change_permission(world):
    alice, bob, job_of = world
    mine = job_of(alice)
    alice.user_permissions.clear()
    alice = get_user_model().objects.get(pk=alice.pk)  # permissions are cached on the instance
    with pytest.raises(GenerationError, match="not found or not yours to cancel"):
        generation_job_cancel(job=mine, user=alice)
    operator = staff("olga", "studies.change_generationjob")
    assert generation_job_cancel(job=mine, user=operator).status == "cancelled"
    with pytest.raises(GenerationError, match="not found or not yours"):
        generation_job_cancel(job=job_of(bob), user=None)


def test_internal_job_parameters_are_refused_naming_the_key(world):
    alice, _, job_of = world
    with pytest.raises(GenerationError, match=r"params\.cursor, params\.usage: not a parameter of rationales jobs"):
        job_of(alice, params={"cursor": 10**9, "usage": {"used_requests": 0}})
    assert job_of(alice, params={"max_requests": 5}).params["max_requests"] == 5


def _train_pool(dataset) -> None:
    """Six train items with a gold rationale and a question of each type: what the jobs draw their
    demonstrations from."""
    for i in range(6):
        item = ItemFactory(dataset=dataset, split="train", question=f"Is train fact {i} true?", gold_answer="yes",
                           gold_rationale=f"Train fact {i} is true.")
        for qtype in ("rephrase", "similar", "counterfactual"):
            GeneralizationQuestion.objects.create(item=item, qtype=qtype, text=f"Is {qtype} fact {i} true?",
                                                  answer="yes", origin="import")


def _hosted_source(server) -> RationaleSource:
    return RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
        decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1})


RATIONALE_REPLY = " yes\nReason: Because the facts say so.\n###\nQuestion: next"


def _alices_rationale_study(alice, server) -> tuple[list[Item], RationaleSource]:
    """The dev items, and the hosted source that Alice's study lists for the first two of them: a
    rationale of that source for those items would be shown to her workers."""
    items = list(Item.objects.filter(split="dev").order_by("pk"))
    _train_pool(items[0].dataset)
    source = _hosted_source(server)
    study = Study.objects.create(name="alices-study", dataset=items[0].dataset, owner=alice)
    study.items.set(items[:2])
    study.sources.set([source])
    return items, source


def _rationale_job(source, items, user):
    return generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="dev", user=user,
                                 enqueue=False)


def test_a_job_adds_no_rationale_to_another_researchers_study(world):
    # Bob's job is refused the two items Alice's study shows (kept as failures with the reason) and
    # stores the third; Alice's own job stores all of them.
    alice, bob, _ = world
    grant(alice, "studies.change_study")
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        items, source = _alices_rationale_study(alice, server)

        def run(user):
            return generation_job_run(job_id=_rationale_job(source, items, user).pk)

        bobs = run(bob)
        assert list(Rationale.objects.filter(source=source).values_list("item_id", flat=True)) == [items[2].pk]
        failures = GenerationFailure.objects.filter(job=bobs).order_by("item_id")
        assert [f.item_id for f in failures] == [items[0].pk, items[1].pk]
        assert all("a study you may not change would show this rationale" in f.reason for f in failures)
        assert (bobs.status, bobs.done, bobs.failed) == ("done", 3, 2)

        run(alice)
        assert Rationale.objects.filter(source=source).count() == 3


def test_a_job_adds_no_generalization_question_to_another_researchers_study(world):
    alice, bob, _ = world
    grant(alice, "studies.change_study")
    items = list(Item.objects.filter(split="dev").order_by("pk"))
    _train_pool(items[0].dataset)
    study = Study.objects.create(name="alices-generalization", dataset=items[0].dataset, owner=alice,
                                 kind=Study.Kind.GENERALIZATION)
    study.items.set(items[:1])
    reply = " Is the sky blue on a clear day?\nAnswer: yes"
    with OpenAIServer(lambda path, body: (200, completion([reply]), {})) as server:
        generator = QuestionGenerator.objects.create(
            name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"backoff_s": 0.01, "concurrency": 1})
        job = generation_job_create(kind="generalization_questions", generator=generator, dataset=items[0].dataset, split="dev",
                                    user=bob, enqueue=False, params={})
        job = generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    generated = GeneralizationQuestion.objects.filter(origin="generator:hosted-questions")
    assert not generated.filter(item=items[0]).exists()
    assert set(generated.values_list("item_id", flat=True)) == {items[1].pk, items[2].pk}
    refused = GenerationFailure.objects.filter(job=job, item=items[0])
    assert refused.exists() and all("would show this question" in f.reason for f in refused)


def test_a_job_whose_researcher_was_deleted_acts_for_nobody_and_a_commands_job_for_the_operator(world):
    # Bob starts a job. His account can no longer be deleted (created_by is PROTECT), but a job left
    # without its researcher before that (created_by NULL, by_operator false) must not gain the
    # operator's reach. It stores only the rationale no study shows; a job a command starts (no
    # user) stores as the operator, as before.
    alice, bob, _ = world
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        items, source = _alices_rationale_study(alice, server)
        orphan = _rationale_job(source, items, bob)
        with pytest.raises(ProtectedError):
            bob.delete()
        GenerationJob.objects.filter(pk=orphan.pk).update(created_by=None)  # as SET_NULL left such jobs
        orphan = generation_job_run(job_id=orphan.pk)
        assert (orphan.created_by_id, orphan.by_operator) == (None, False)
        assert list(Rationale.objects.filter(source=source).values_list("item_id", flat=True)) == [items[2].pk]
        assert (orphan.status, orphan.failed) == ("done", 2)

        operators = generation_job_run(job_id=_rationale_job(source, items, None).pk)
        assert operators.by_operator
        assert Rationale.objects.filter(source=source).count() == 3
