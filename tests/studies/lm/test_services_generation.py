"""Generation jobs end to end on tiny local models: progress, resume after a crash, idempotent
tasks, failures kept with their raw text, generalization questions left unvalidated, Gen-U."""
import pytest

from studies.lm import backends
from studies.lm.templates import DEFAULT_INSTRUCTIONS
from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenUPrediction,
    QuestionGenerator,
    Rationale,
    RationaleSource,
)
from studies.services import generation
from studies.tasks import run_generation_job

from .openai_server import OpenAIServer, completion

pytestmark = [pytest.mark.lm, pytest.mark.django_db]
pytest.importorskip("torch")


def t5_source(lm_models, name="tiny-t5", key="t5"):
    return RationaleSource.objects.create(name=name, kind="lm", backend="seq2seq",
                                          model_name_or_path=str(lm_models[key]), decoding={"max_new_tokens": 24})


def rationale_job(source, dataset, **kw):
    return generation.generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                            enqueue=False, **kw)


def test_source_backed_by_a_local_folder_generates_50_rationales_with_progress(lm_models, dev_items, strategyqa_dataset):
    source = t5_source(lm_models)
    job = rationale_job(source, strategyqa_dataset)
    assert (job.total, job.done, job.status) == (50, 0, "queued")

    assert generation.generation_job_run_batch(job_id=job.pk) is True
    job.refresh_from_db()
    assert (job.status, job.done, job.total) == ("running", 16, 50)
    assert job.rate > 0 and job.eta_seconds > 0 and job.started_at is not None

    generation.generation_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.done, job.eta_seconds) == ("done", 50, 0.0)
    rationales = list(Rationale.objects.filter(source=source))
    assert len(rationales) == 50 and job.failed == 0
    sample = rationales[0]
    assert sample.predicted_answer in {"yes", "no"}
    assert sample.prediction_correct == (sample.predicted_answer == sample.item.gold_answer)
    assert "<extra_id_1>" in sample.raw_output
    info = sample.generation_info
    assert info["backend"] == "seq2seq" and info["model"] == str(lm_models["t5"]) and info["job_id"] == job.pk
    assert info["template"] == "t5_explain" and info["decoding"]["do_sample"] is False
    assert info["decoding"]["max_new_tokens"] == 24 and info["seed"] == 0 and info["device"] == "cpu"


def test_crash_halfway_then_resume_ends_with_exactly_50_rationales(
        lm_models, dev_items, strategyqa_dataset, monkeypatch, django_capture_on_commit_callbacks, admin_user):
    source = t5_source(lm_models)
    real = backends.Seq2SeqBackend.generate
    calls = {"n": 0}

    def crash_on_third_batch(self, prompts, decoding):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("worker lost its GPU")
        return real(self, prompts, decoding)

    monkeypatch.setattr(backends.Seq2SeqBackend, "generate", crash_on_third_batch)
    with pytest.raises(RuntimeError), django_capture_on_commit_callbacks(execute=True):
        job = generation.generation_job_create(kind="rationales", source=source, dataset=strategyqa_dataset,
                                               split="dev")
    job.refresh_from_db()
    assert job.status == "failed" and "worker lost its GPU" in job.error
    assert Rationale.objects.filter(source=source).count() == 32 == job.done

    with django_capture_on_commit_callbacks(execute=True):
        generation.generation_job_resume(job=job, user=admin_user)
    job.refresh_from_db()
    assert (job.status, job.done) == ("done", 50)
    assert Rationale.objects.filter(source=source).count() == 50
    assert Rationale.objects.filter(source=source).values("item").distinct().count() == 50


def test_worker_killed_mid_job_redelivery_continues_where_it_stopped(lm_models, dev_items, strategyqa_dataset):
    source = t5_source(lm_models)
    job = rationale_job(source, strategyqa_dataset, limit=20, batch_size=8)
    generation.generation_job_run_batch(job_id=job.pk)  # the worker dies after this batch
    first = {r.item_id: r.pk for r in Rationale.objects.filter(source=source)}
    run_generation_job.apply(args=[job.pk])  # acks_late: the message is delivered again
    job.refresh_from_db()
    assert job.status == "done" and Rationale.objects.filter(source=source).count() == 20
    assert all(Rationale.objects.get(pk=pk).item_id == item for item, pk in first.items())


def test_running_a_finished_job_through_the_task_again_changes_nothing(lm_models, dev_items, strategyqa_dataset):
    source = t5_source(lm_models)
    job = rationale_job(source, strategyqa_dataset, limit=12, batch_size=8)
    run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    before_job = (job.status, job.done, job.rate, job.updated_at, job.finished_at)
    before = list(Rationale.objects.filter(source=source).values_list("pk", "text", "updated_at"))
    assert len(before) == 12

    run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    assert (job.status, job.done, job.rate, job.updated_at, job.finished_at) == before_job
    assert list(Rationale.objects.filter(source=source).values_list("pk", "text", "updated_at")) == before


def test_a_second_job_for_the_same_source_skips_existing_rationales(lm_models, dev_items, strategyqa_dataset,
                                                                   monkeypatch):
    source = t5_source(lm_models)
    first = generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=8).pk)
    calls = []
    real = backends.Seq2SeqBackend.generate
    monkeypatch.setattr(backends.Seq2SeqBackend, "generate",
                        lambda self, prompts, decoding: calls.append(len(prompts)) or real(self, prompts, decoding))
    job = generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=20).pk)
    assert first.done == 8 and job.done == 20 and Rationale.objects.filter(source=source).count() == 20
    assert calls == [12]


def test_the_next_batch_reads_one_batch_of_items_when_they_are_not_done(lm_models, dev_items, strategyqa_dataset):
    """Issue 15: the batch looked for its items in windows of 256 from the cursor, re-checking
    the same 240 items every batch; now the first window is one batch, then it doubles."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    source = t5_source(lm_models)
    generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=5).pk)
    job = rationale_job(source, strategyqa_dataset, batch_size=4)  # 50 items, the first 5 done
    handler = generation.HANDLERS["rationales"]
    with CaptureQueriesContext(connection) as queries:
        todo, first, known = handler.next_batch(job)
    assert (len(todo), first, known) == (4, 5, 5)
    # windows of 4 then 8 items, one read each (the job recorded no failure, so none is read)
    assert len(queries.captured_queries) == 2


def test_unparseable_outputs_are_kept_as_failures_with_raw_text(lm_models, dev_items, train_items, strategyqa_dataset):
    source = RationaleSource.objects.create(name="tiny-gpt2", kind="lm", backend="causal", seed=5,
                                            model_name_or_path=str(lm_models["gpt2"]), decoding={"max_new_tokens": 24})
    job = generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=16).pk)
    assert job.status == "done" and job.done == 16
    assert len(job.params["demonstrations"]) == 6
    train_ids = {i.external_id for i in train_items}
    assert {d["key"] for d in job.params["demonstrations"]} <= train_ids
    failures = list(GenerationFailure.objects.filter(job=job))
    assert Rationale.objects.filter(source=source).count() + len(failures) == 16
    assert job.failed == len(failures)
    for failure in failures:
        assert failure.reason and failure.raw_output == failure.raw_output.split("###")[0]
    # The same seed draws the same demonstrations (when the job starts: test_demonstration_rights.py).
    again = rationale_job(source, strategyqa_dataset, limit=1)
    generation.generation_job_run_batch(job_id=again.pk)
    again.refresh_from_db()
    assert again.params["demonstrations"] == job.params["demonstrations"]


def test_cancel_stops_after_the_current_batch(lm_models, dev_items, strategyqa_dataset, admin_user):
    source = t5_source(lm_models)
    job = rationale_job(source, strategyqa_dataset)
    generation.generation_job_run_batch(job_id=job.pk)
    generation.generation_job_cancel(job=job, user=admin_user)
    assert generation.generation_job_run_batch(job_id=job.pk) is False
    job.refresh_from_db()
    assert job.status == "cancelled" and job.cancel_requested
    assert Rationale.objects.filter(source=source).count() == 16
    with pytest.raises(generation.GenerationError, match="only queued or running"):
        generation.generation_job_cancel(job=job, user=admin_user)


def test_openai_source_stops_at_its_budget_cap(dev_items, strategyqa_dataset, train_items):
    reply = " yes\nReason: Because the facts say so.\n###\nQuestion: next"
    with OpenAIServer(lambda path, body: (200, completion([reply], tokens=50), {})) as server:
        source = RationaleSource.objects.create(
            name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 2})
        job = rationale_job(source, strategyqa_dataset, params={"max_requests": 20})
        job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "failed" and "budget cap reached: 20 of 20 requests" in job.error
    assert Rationale.objects.filter(source=source).count() == 16 == job.done
    assert job.params["usage"]["used_requests"] == 20
    r = Rationale.objects.filter(source=source).first()
    assert (r.predicted_answer, r.text) == ("yes", "Because the facts say so.")
    assert server.requests[0]["json"]["prompt"].startswith("Answer the question from the provided choices")


def test_source_that_is_not_a_language_model_is_refused(strategyqa_dataset, dev_items):
    source = RationaleSource.objects.create(name="gold", kind="gold")
    with pytest.raises(generation.GenerationError, match="not a language model source"):
        rationale_job(source, strategyqa_dataset)


def import_train_questions(train_items, generalisation):
    questions = []
    for item in train_items:
        for text, answer, qtype in generalisation.get(item.question, []):
            if answer in ("True", "False") and text.strip():
                questions.append(GeneralizationQuestion(item=item, qtype=qtype, text=" ".join(text.split()),
                                                        answer="yes" if answer == "True" else "no", origin="import"))
    GeneralizationQuestion.objects.bulk_create(questions, ignore_conflicts=True)


def test_generalization_questions_for_10_items_end_up_unvalidated(
        lm_models, dev_items, train_items, strategyqa_dataset, strategyqa_generalisation):
    import_train_questions(train_items, strategyqa_generalisation)
    generator = QuestionGenerator.objects.create(name="tiny-questions", backend="seq2seq",
                                                 model_name_or_path=str(lm_models["t5_questions"]))
    job = generation.generation_job_create(kind="generalization_questions", generator=generator,
                                           dataset=strategyqa_dataset, split="dev", limit=10, batch_size=4,
                                           enqueue=False)
    # Drawn into the job (the operator's: from every train question), never saved on the generator.
    assert all(len(job.params["demonstrations"][t]) == 6 for t in ("rephrase", "similar", "counterfactual"))
    assert "the operator's job: all of them" in job.params["demonstrations_from"]["rephrase"]
    generator.refresh_from_db()
    assert generator.demonstrations == {}
    job = generation.generation_job_run(job_id=job.pk)
    assert (job.status, job.done, job.total) == ("done", 10, 10)

    generated = GeneralizationQuestion.objects.filter(origin="generator:tiny-questions")
    assert generated.exists()
    assert set(generated.values_list("validation_status", flat=True)) == {"unvalidated"}
    assert set(generated.values_list("item_id", flat=True)) <= {i.pk for i in dev_items[:10]}
    from studies.lm.parsing import question_problem
    from studies.lm.questions import normalise

    for q in generated:
        assert normalise(q.text) != normalise(q.item.question)
        assert q.answer in {"yes", "no"} and q.metadata["job_id"] == job.pk
        assert q.metadata["decoding"]["temperature"] == 0.7 and q.metadata["decoding"]["num_return_sequences"] == 5
        assert question_problem(q.text) is None and q.metadata["answer_origin"] == "lm"
        if q.qtype == "counterfactual":  # the LM's answer, kept whether or not it flips the original's
            assert q.metadata["flips_original_answer"] == (q.answer != q.item.gold_answer)
        others = generated.filter(item=q.item, qtype=q.qtype).exclude(pk=q.pk)
        assert normalise(q.text) not in {normalise(o.text) for o in others}
    processed = set(generated.values_list("item_id", flat=True)) | set(
        GenerationFailure.objects.filter(job=job).values_list("item_id", flat=True))
    assert processed == {i.pk for i in dev_items[:10]}

    before = set(generated.values_list("pk", "item_id"))
    generation.generation_job_run(job_id=job.pk)  # the same job again: nothing to do
    assert set(generated.values_list("pk", "item_id")) == before
    # A second job retries only the items that have no question yet.
    generation.generation_job_run(job_id=generation.generation_job_create(
        kind="generalization_questions", generator=generator, dataset=strategyqa_dataset, split="dev", limit=10,
        enqueue=False).pk)
    had = {item for _, item in before}
    assert {(pk, item) for pk, item in generated.values_list("pk", "item_id") if item in had} == before


def test_a_question_generated_under_several_types_is_kept_under_each_once(
        dev_items, train_items, strategyqa_dataset, strategyqa_generalisation):
    """The same text under two types of one item is kept under each (issue 21 item 3: the authors'
    validated test questions hold 84 such pairs; a validation study decides which type is right),
    and only once per type."""
    import_train_questions(train_items, strategyqa_generalisation)

    own = {"rephrase": "Would a whale fit in a bathtub?", "similar": "Can penguins fly over mountains?",
           "counterfactual": "Does ice sink in liquid water?"}

    def reply(path, body):  # the same question whatever the type, and one of the type's own
        text = next(q for qtype, q in own.items() if body["prompt"].startswith(DEFAULT_INSTRUCTIONS[qtype]))
        return 200, completion(["Is a tomato a fruit?\nanswer: True", f"{text}\nanswer: False"], tokens=5), {}

    with OpenAIServer(reply) as server:
        generator = QuestionGenerator.objects.create(
            name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"num_return_sequences": 2, "backoff_s": 0.01})
        job = generation.generation_job_create(kind="generalization_questions", generator=generator,
                                               dataset=strategyqa_dataset, split="dev", limit=2, enqueue=False)
        job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    generated = GeneralizationQuestion.objects.filter(origin="generator:hosted-questions")
    for item in dev_items[:2]:
        tomato = generated.filter(item=item, text="Is a tomato a fruit?")
        assert sorted(tomato.values_list("qtype", flat=True)) == ["counterfactual", "rephrase", "similar"]
        assert set(generated.filter(item=item).values_list("qtype", flat=True)) == {
            "rephrase", "similar", "counterfactual"}


def test_generalization_questions_need_demonstrations(lm_models, dev_items, strategyqa_dataset):
    generator = QuestionGenerator.objects.create(name="g", backend="seq2seq", model_name_or_path="x")
    with pytest.raises(generation.GenerationError, match="no demonstrations for type 'rephrase'"):
        generation.generation_job_create(kind="generalization_questions", generator=generator,
                                         dataset=strategyqa_dataset, split="dev", enqueue=False)


def genu_fixture(lm_models, dev_items, strategyqa_dataset, n=6):
    """A source with rationales for ``n`` items, two questions per item validated as valid, one
    left unvalidated and one marked invalid on the first item."""
    from studies.services.questions import generalization_questions_set_validation

    source = t5_source(lm_models)
    generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=n).pk)
    valid = []
    for item in dev_items[:n]:
        valid.append(GeneralizationQuestion.objects.create(
            item=item, qtype="rephrase", text=f"Rephrased: {item.question}", answer=item.gold_answer))
        valid.append(GeneralizationQuestion.objects.create(
            item=item, qtype="counterfactual", text=f"Not: {item.question}",
            answer="no" if item.gold_answer == "yes" else "yes"))
    generalization_questions_set_validation(questions=valid, status="valid")
    GeneralizationQuestion.objects.create(item=dev_items[0], qtype="similar", text="Unvalidated one?", answer="yes")
    invalid = GeneralizationQuestion.objects.create(item=dev_items[0], qtype="similar", text="Invalid one?",
                                                    answer="yes")
    generalization_questions_set_validation(questions=[invalid], status="invalid")
    return source


def test_genu_answers_store_one_prediction_per_validated_question_and_answerer(
        lm_models, dev_items, strategyqa_dataset):
    source = genu_fixture(lm_models, dev_items, strategyqa_dataset)
    fi = t5_source(lm_models, name="F^I", key="t5_answerer")
    fir = t5_source(lm_models, name="F^IR", key="t5_answerer")
    job = generation.generation_job_create(kind="genu_answers", source=source, dataset=strategyqa_dataset,
                                           split="dev", params={"answerer_i": fi.pk, "answerer_ir": fir.pk},
                                           batch_size=4, enqueue=False)
    assert job.total == 6 and job.params["only_valid"] is True  # the paper's way unless asked otherwise
    job = generation.generation_job_run(job_id=job.pk)
    assert (job.status, job.done) == ("done", 6)
    predictions = GenUPrediction.objects.filter(rationale_source=source)
    assert predictions.count() == 24
    assert predictions.filter(answerer="I").count() == predictions.filter(answerer="IR").count() == 12
    assert set(predictions.values_list("generalization_question__validation_status", flat=True)) == {"valid"}
    for p in predictions:
        assert p.correct == (p.predicted_answer == p.generalization_question.answer)
        assert p.answerer_model == str(lm_models["t5_answerer"])
    generation.generation_job_run(job_id=job.pk)
    assert predictions.count() == 24


def test_genu_on_unvalidated_questions_is_an_explicit_choice(lm_models, dev_items, strategyqa_dataset):
    source = genu_fixture(lm_models, dev_items, strategyqa_dataset, n=2)
    fi = t5_source(lm_models, name="F^I", key="t5_answerer")
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="genu_answers", source=source, dataset=strategyqa_dataset, split="dev",
        params={"answerer_i": fi.pk, "answerer_ir": fi.pk, "only_valid": False}, enqueue=False).pk)
    assert job.params["only_valid"] is False
    statuses = set(GenUPrediction.objects.filter(rationale_source=source)
                   .values_list("generalization_question__validation_status", flat=True))
    assert statuses == {"valid", "unvalidated"}  # never the invalid one


def test_genu_without_validated_questions_says_how_to_get_them(lm_models, dev_items, strategyqa_dataset):
    source = t5_source(lm_models)
    generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=2).pk)
    GeneralizationQuestion.objects.create(item=dev_items[0], qtype="rephrase", text="Unchecked?", answer="yes")
    with pytest.raises(generation.GenerationError, match="validated generalization questions"):
        generation.generation_job_create(kind="genu_answers", source=source, dataset=strategyqa_dataset,
                                         split="dev", params={"answerer_i": source.pk, "answerer_ir": source.pk},
                                         enqueue=False)


def test_causal_answerers_go_through_the_same_backend_interface(lm_models, dev_items, strategyqa_dataset):
    source = genu_fixture(lm_models, dev_items, strategyqa_dataset, n=3)
    gpt2 = RationaleSource.objects.create(name="gpt2-answerer", kind="lm", backend="causal",
                                          model_name_or_path=str(lm_models["gpt2"]))
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="genu_answers", source=source, dataset=strategyqa_dataset, split="dev",
        params={"answerer_i": gpt2.pk, "answerer_ir": gpt2.pk}, enqueue=False).pk)
    assert job.status == "done" and job.done == 3
    predictions = GenUPrediction.objects.filter(rationale_source=source)
    assert predictions.count() == 12 and set(predictions.values_list("answerer_model", flat=True)) == {
        str(lm_models["gpt2"])}
    unparsed = predictions.filter(predicted_answer="")
    assert GenerationFailure.objects.filter(job=job).count() == unparsed.count()
    assert not unparsed.filter(correct=True).exists()
    for failure in GenerationFailure.objects.filter(job=job):
        assert "left out of Gen-U" in failure.reason


def test_genu_score_is_callable_without_a_job_and_stores_nothing(lm_models, dev_items, strategyqa_dataset):
    from studies.lm import genu as rule
    from studies.services.generation.genu import genu_score

    genu_fixture(lm_models, dev_items, strategyqa_dataset, n=3)
    fi = t5_source(lm_models, name="F^I", key="t5_answerer")
    items = dev_items[:3]
    pairs = [(items[0], "A rationale."), (items[0], "Another rationale."), (items[1], "x"), (items[2], "y")]
    cache = {}
    result = genu_score(pairs=pairs, answerer_i=fi, answerer_ir=fi, i_answers=cache)
    assert GenUPrediction.objects.count() == 0
    assert len(result.scores) == 4 and len(result.questions) == 8 and len(cache) == 6
    assert result.question_filter == "validated questions only" and "lowest" in result.tie_rule
    for index in range(4):
        counted = [q.score for q in result.questions if q.pair == index and q.counted]
        assert result.scores[index] == (rule.mode_score(counted) if counted else None)
    for q in result.questions:
        if q.counted:
            assert q.score == rule.question_score(q.i.correct, q.ir.correct)
    assert result.unparseable["F^I"] == sum(not q.i.parsed for q in result.questions)


def test_a_job_whose_message_died_with_its_worker_is_queued_again_and_finishes(
    lm_models, dev_items, strategyqa_dataset, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from studies.models import GenerationJob
    from studies.tasks import resume_stalled_generation_jobs

    source = t5_source(lm_models)
    job = rationale_job(source, strategyqa_dataset, limit=20, batch_size=8)
    generation.generation_job_run_batch(job_id=job.pk)  # then the worker is killed: no message left
    assert resume_stalled_generation_jobs.apply().get() == []  # it moved recently: left alone
    GenerationJob.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    finetune = GenerationJob.objects.create(kind="finetune", status="running", total=1, params={})
    GenerationJob.objects.filter(pk=finetune.pk).update(updated_at=timezone.now() - timedelta(hours=1))

    with django_capture_on_commit_callbacks(execute=True):
        assert resume_stalled_generation_jobs.apply().get() == [job.pk]  # fine-tuning is never re-run

    job.refresh_from_db()
    assert job.status == "done" and Rationale.objects.filter(source=source).count() == 20
    assert resume_stalled_generation_jobs.apply().get() == []  # done: nothing more to queue


def test_the_stalled_job_check_runs_on_beat():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["studies-resume-stalled-generation-jobs"]
    assert entry["task"] == "studies.resume_stalled_generation_jobs" and entry["schedule"] <= 60


def test_a_failing_endpoint_is_retried_by_one_layer_only(dev_items, strategyqa_dataset, train_items):
    # The backend's back-off is the only retry layer: 1 + max_retries requests, then the job fails
    # with the reason (the task used to retry the batch on top: up to 6 x 6 requests a prompt).
    with OpenAIServer(lambda path, body: (503, {"error": "overloaded"}, {})) as server:
        source = RationaleSource.objects.create(
            name="down", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_retries": 2, "backoff_s": 0.001, "concurrency": 1})
        job = rationale_job(source, strategyqa_dataset, limit=1)
        run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    assert len(server.requests) == 3
    assert job.status == "failed" and "still failing after 2 retries" in job.error and "resume" in job.error
