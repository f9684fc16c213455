"""A Gen-U prediction records the rationale source that answered it (``answerer_source``) beside its
model path (``answerer_model``): two sources may share a path (a checkpoint registered twice, another
researcher's fine-tuned copy), and the path alone cannot tell which answered."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from studies.models import GeneralizationQuestion, GenUPrediction, RationaleSource
from studies.services import generation
from studies.services.questions import generalization_questions_set_validation
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory

from .openai_server import OpenAIServer, completion

pytestmark = pytest.mark.django_db


def explained_items_with_valid_questions(n: int = 2) -> tuple[RationaleSource, list]:
    """``n`` dev items of a yes/no dataset, each with a rationale of the imported source
    ``explainer`` and one validated rephrase: what a Gen-U job answers. (source, items)."""
    dataset = DatasetFactory(name="genu-ds")
    source = RationaleSource.objects.create(name="explainer", kind=RationaleSource.Kind.IMPORTED)
    items = [ItemFactory(dataset=dataset, split="dev", gold_answer="yes") for _ in range(n)]
    questions = []
    for item in items:
        RationaleFactory(item=item, source=source)
        questions.append(GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes",
                                                               text=f"Rephrased: {item.question}"))
    generalization_questions_set_validation(questions=questions, status="valid")
    return source, items


def test_a_genu_job_records_which_source_answered_as_f_i_and_which_as_f_ir():
    source, items = explained_items_with_valid_questions()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        # Two sources on one model path: only the recorded source says which answered.
        answerers = {role: RationaleSource.objects.create(
            name=f"ckpt-{role}", kind="lm", backend="openai", model_name_or_path="shared/ckpt",
            endpoint_url=server.url, decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")}
        job = generation.generation_job_run(job_id=generation.generation_job_create(
            kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
            params={"answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk}).pk)
    assert job.status == "done", job.error

    stored = GenUPrediction.objects.filter(rationale_source=source)
    assert stored.count() == 4
    for role, answerer in answerers.items():
        assert set(stored.filter(answerer=role).values_list("answerer_source_id", "answerer_model")) == {
            (answerer.pk, "shared/ckpt")}


def test_the_admin_names_the_answerer_source_only_to_a_reader_of_it():
    """The prediction's page shows its answerer's model path to whoever reads the prediction, and the
    answerer source's name only to a reader of that source (``sources_for_user``)."""
    bob, bob_client = researcher_without_reference_views("bob")
    dataset = DatasetFactory(name="genu-ds")
    item = ItemFactory(dataset=dataset, split="dev", gold_answer="yes")
    source = RationaleSource.objects.create(name="bobs-explainer", kind=RationaleSource.Kind.IMPORTED)
    RationaleFactory(item=item, source=source)
    study_create(name="bobs", dataset=dataset, split="dev", sources=[source], owner=bob, user=None, consent_text="ok")
    question = GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes", text="Rephrased?")
    hidden = RationaleSource.objects.create(name="ALICE-CKPT", kind="lm", backend="seq2seq",
                                            model_name_or_path="shared/ckpt")
    prediction = GenUPrediction.objects.create(generalization_question=question, rationale_source=source,
                                               answerer="I", answerer_source=hidden, answerer_model="shared/ckpt",
                                               predicted_answer="yes", correct=True)
    url = reverse("admin:studies_genuprediction_change", args=[prediction.pk])

    page = bob_client.get(url).content.decode()
    assert "shared/ckpt" in page and "a source you may not read" in page and "ALICE-CKPT" not in page

    root = get_user_model().objects.create_superuser(username="root", password="pw")
    bob_client.force_login(root)
    assert "ALICE-CKPT" in bob_client.get(url).content.decode()


def test_a_genu_job_with_other_answerers_than_the_stored_ones_is_refused_and_a_rerun_with_the_same_is_not():
    """Job 1 answers with A-I / A-IR. Job 2 on the same source with B-I / B-IR would skip every stored
    prediction (one per question, source and role), end done and compute nothing: refused when created,
    naming the stored answerers. A rerun with A-I / A-IR (resuming after new questions) still runs."""
    source, items = explained_items_with_valid_questions()
    calls = []

    def answer(path, body):
        calls.append(body)
        return 200, completion([" yes"]), {}

    with OpenAIServer(answer) as server:
        answerers = {name: RationaleSource.objects.create(
            name=name, kind="lm", backend="openai", model_name_or_path=f"ckpt/{name}", endpoint_url=server.url,
            decoding={"backoff_s": 0.01, "concurrency": 1}) for name in ("A-I", "A-IR", "B-I", "B-IR")}

        def create(i, ir):
            return generation.generation_job_create(
                kind="genu_answers", source=source, item_ids=[it.pk for it in items], user=None, enqueue=False,
                params={"answerer_i": answerers[i].pk, "answerer_ir": answerers[ir].pk})

        first = generation.generation_job_run(job_id=create("A-I", "A-IR").pk)
        assert first.status == "done", first.error
        sent = len(calls)

        with pytest.raises(generation.GenerationError) as refused:
            create("B-I", "B-IR")
        message = str(refused.value)
        assert "2 of this job's generalization questions already have Gen-U predictions of 'explainer'" in message
        assert (f"F^I: ckpt/A-I (source #{answerers['A-I'].pk}); F^IR: ckpt/A-IR (source #{answerers['A-IR'].pk})"
                in message)
        assert "'B-I' / 'B-IR'" in message and "cannot be deleted or replaced there" in message
        assert len(calls) == sent

        # The same answerers again: a question added since is answered, the stored ones kept.
        item = items[0]
        added = GeneralizationQuestion.objects.create(item=item, qtype="similar", answer="yes", text="Similar?")
        generalization_questions_set_validation(questions=[added], status="valid")
        again = generation.generation_job_run(job_id=create("A-I", "A-IR").pk)
    assert again.status == "done", again.error
    assert GenUPrediction.objects.filter(rationale_source=source).count() == 6
    assert set(GenUPrediction.objects.filter(rationale_source=source).values_list("answerer_source__name", flat=True)) \
        == {"A-I", "A-IR"}


def answerer_pairs(server, *names: str) -> dict[str, RationaleSource]:
    """OpenAI-compatible LM sources ``names`` on ``server``, each on its own model path ``ckpt/<name>``."""
    return {name: RationaleSource.objects.create(
        name=name, kind="lm", backend="openai", model_name_or_path=f"ckpt/{name}", endpoint_url=server.url,
        decoding={"backoff_s": 0.01, "concurrency": 1}) for name in names}


def genu_job(source, items, answerers, i: str, ir: str, *, user=None):
    return generation.generation_job_create(
        kind="genu_answers", source=source, item_ids=[it.pk for it in items], user=user, enqueue=False,
        params={"answerer_i": answerers[i].pk, "answerer_ir": answerers[ir].pk})


def test_a_genu_job_is_refused_while_another_active_job_on_its_source_answers_with_other_answerers():
    """Jobs A (A-I / A-IR) and B (B-I / B-IR) created on one source before either runs: B saw no
    stored prediction, and once A ran, B ended ``done 2/2`` having sent nothing, every figure A's.
    B is refused while A is queued, naming A."""
    source, items = explained_items_with_valid_questions()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR")
        first = genu_job(source, items, answerers, "A-I", "A-IR")

        with pytest.raises(generation.GenerationError) as refused:
            genu_job(source, items, answerers, "B-I", "B-IR")
        assert (f"another Gen-U job on 'explainer' answers some of this job's items with other answerers: "
                f"job {first.pk} (queued; F^I: source #{answerers['A-I'].pk}") in str(refused.value)

        genu_job(source, items, answerers, "A-I", "A-IR")  # the same answerers beside it: allowed
        assert generation.generation_job_run(job_id=first.pk).status == "done"


def test_a_genu_job_resumed_after_another_jobs_predictions_were_stored_fails_instead_of_ending_done():
    """Job B (B-I / B-IR) failed before answering anything; job A (A-I / A-IR) then answered every
    question. Resuming B (no creation check runs) ended ``done`` with nothing asked: it now fails with
    the refusal before its batch, sending nothing. Resuming A after a failure goes on."""
    source, items = explained_items_with_valid_questions()
    root = get_user_model().objects.create_superuser("root", password="pw")
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR")
        late = genu_job(source, items, answerers, "B-I", "B-IR", user=root)
        generation.generation_job_fail(job_id=late.pk, error="the endpoint was down")
        first = genu_job(source, items, answerers, "A-I", "A-IR", user=root)
        generation.generation_job_fail(job_id=first.pk, error="the endpoint was down")
        first = generation.generation_job_run(job_id=generation.generation_job_resume(
            job=first, user=root, enqueue=False).pk)
        assert first.status == "done", first.error
        sent = len(server.requests)

        late = generation.generation_job_run(job_id=generation.generation_job_resume(
            job=late, user=root, enqueue=False).pk)
    assert late.status == "failed"
    assert "2 of this job's generalization questions already have Gen-U predictions of 'explainer'" in late.error
    assert late.done == 0 and len(server.requests) == sent
    assert set(GenUPrediction.objects.filter(rationale_source=source).values_list("answerer_source__name", flat=True)) \
        == {"A-I", "A-IR"}


def test_the_refusal_says_when_the_stored_answerers_are_not_the_researchers_to_use():
    """The operator's job answered Bob's source with answerers that no study of Bob's lists: a job of
    Bob's with them is refused (the job inputs check), so the refusal tells him to ask their owner
    instead of advising a rerun with them."""
    bob, _ = researcher_without_reference_views("bob")
    source, items = explained_items_with_valid_questions()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR")
        study_create(name="bobs", dataset=items[0].dataset, split="dev", owner=bob, user=None, consent_text="ok",
                     sources=[source, answerers["B-I"], answerers["B-IR"]])
        assert generation.generation_job_run(job_id=genu_job(source, items, answerers, "A-I", "A-IR").pk).status \
            == "done"

        with pytest.raises(generation.GenerationError) as refused:
            genu_job(source, items, answerers, "B-I", "B-IR", user=bob)
        with pytest.raises(generation.GenerationError, match="no rationale source .* that you may use"):
            genu_job(source, items, answerers, "A-I", "A-IR", user=bob)
    message = str(refused.value)
    assert "answered by answerers you may not use (ckpt/A-I, ckpt/A-IR): ask their owner" in message
    assert "Run it with the stored answerers" not in message


def test_the_answerers_refusal_hides_the_ids_of_sources_the_researcher_may_not_read():
    """The stored answerers are named by model path (as the admin's prediction page shows them), and
    by source id only to a reader of that source: Bob is told "a source you may not read", the
    operator the ids."""
    bob, _ = researcher_without_reference_views("bob")
    source, items = explained_items_with_valid_questions()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR")
        study_create(name="bobs", dataset=items[0].dataset, split="dev", owner=bob, user=None, consent_text="ok",
                     sources=[source, answerers["B-I"], answerers["B-IR"]])
        assert generation.generation_job_run(job_id=genu_job(source, items, answerers, "A-I", "A-IR").pk).status \
            == "done"

        with pytest.raises(generation.GenerationError) as bobs:
            genu_job(source, items, answerers, "B-I", "B-IR", user=bob)
        with pytest.raises(generation.GenerationError) as operators:
            genu_job(source, items, answerers, "B-I", "B-IR")
    message = str(bobs.value)
    assert ("F^I: ckpt/A-I (a source you may not read); F^IR: ckpt/A-IR (a source you may not read)"
            in message)
    assert f"#{answerers['A-I'].pk}" not in message and f"#{answerers['A-IR'].pk}" not in message
    assert (f"F^I: ckpt/A-I (source #{answerers['A-I'].pk}); F^IR: ckpt/A-IR (source #{answerers['A-IR'].pk})"
            in str(operators.value))


def test_resuming_a_genu_job_is_refused_while_another_active_job_answers_its_items_with_other_answerers():
    """Job B (B-I / B-IR) failed; job A (A-I / A-IR) was then created on the same items (B was not
    active). Resuming B queued two clashing jobs, and whichever ran first the other failed: the
    resume is refused as creating B would be, naming A, and B stays failed. Once A has ended, B may
    be resumed (and then stops before its batch on A's stored predictions)."""
    source, items = explained_items_with_valid_questions()
    root = get_user_model().objects.create_superuser("root", password="pw")
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR")
        late = genu_job(source, items, answerers, "B-I", "B-IR", user=root)
        generation.generation_job_fail(job_id=late.pk, error="the endpoint was down")
        first = genu_job(source, items, answerers, "A-I", "A-IR", user=root)

        with pytest.raises(generation.GenerationError) as refused:
            generation.generation_job_resume(job=late, user=root, enqueue=False)
        assert str(refused.value).startswith(
            f"job {late.pk} cannot be resumed: another Gen-U job on 'explainer' answers some of this job's items "
            f"with other answerers: job {first.pk} (queued; F^I: source #{answerers['A-I'].pk}")
        late.refresh_from_db()
        assert late.status == "failed"

        assert generation.generation_job_run(job_id=first.pk).status == "done"
        late = generation.generation_job_run(job_id=generation.generation_job_resume(
            job=late, user=root, enqueue=False).pk)
    assert late.status == "failed" and "already have Gen-U predictions of 'explainer'" in late.error


def test_the_active_jobs_refusal_names_only_the_jobs_the_researcher_may_read():
    """Bob (no ``studies.view_generationjob``) reads his own jobs only. His job C on the first item and
    Alice's job A on the second are queued; his new job on both with B-I / B-IR is refused naming C
    with its id and answerers, and Alice's as another researcher's queued Gen-U job, without its id
    or answerers. The operator is told both ids."""
    bob, _ = researcher_without_reference_views("bob")
    bob.user_permissions.remove(Permission.objects.get(codename="view_generationjob"))
    bob = get_user_model().objects.get(pk=bob.pk)
    alice, _ = researcher_without_reference_views("alice")
    source, items = explained_items_with_valid_questions()
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = answerer_pairs(server, "A-I", "A-IR", "B-I", "B-IR", "C-I", "C-IR")
        study_create(name="bobs", dataset=items[0].dataset, split="dev", owner=bob, user=None, consent_text="ok",
                     sources=[source, answerers["B-I"], answerers["B-IR"], answerers["C-I"], answerers["C-IR"]])
        study_create(name="alices", dataset=items[0].dataset, split="dev", owner=alice, user=None,
                     consent_text="ok", sources=[source, answerers["A-I"], answerers["A-IR"]])
        bobs = genu_job(source, items[:1], answerers, "C-I", "C-IR", user=bob)
        alices = genu_job(source, items[1:], answerers, "A-I", "A-IR", user=alice)

        with pytest.raises(generation.GenerationError) as refused:
            genu_job(source, items, answerers, "B-I", "B-IR", user=bob)
        with pytest.raises(generation.GenerationError) as operators:
            genu_job(source, items, answerers, "B-I", "B-IR")
    message = str(refused.value)
    assert (f"with other answerers: job {bobs.pk} (queued; F^I: source #{answerers['C-I'].pk}, F^IR: source "
            f"#{answerers['C-IR'].pk}); another researcher's queued Gen-U job. One prediction") in message
    assert f"job {alices.pk}" not in message and f"#{answerers['A-I'].pk}" not in message
    assert "Run this job on other items, or once that job has ended" in message
    assert f"job {alices.pk} (queued; F^I: source #{answerers['A-I'].pk}" in str(operators.value)
