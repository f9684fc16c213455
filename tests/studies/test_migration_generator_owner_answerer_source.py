"""The migration that adds ``QuestionGenerator.created_by`` and ``GenUPrediction.answerer_source``
guesses neither for existing rows: a generator made before has no owner (whoever ran its first job
need not have made it), and a prediction made before records no answerer source (two sources may share
its model path), so the readers fall back to that path for it."""
from __future__ import annotations

import pytest

BEFORE = [("studies", "0013_generationjob_by_operator")]
AFTER = [("studies", "0014_questiongenerator_owner_genu_answerer_source")]


@pytest.mark.django_db(transaction=True)
def test_existing_generators_have_no_owner_and_existing_predictions_no_answerer_source(migrate_to):
    old = migrate_to(BEFORE)
    User, Generator, Job = (old.get_model("auth", "User"), old.get_model("studies", "QuestionGenerator"),
                            old.get_model("studies", "GenerationJob"))
    dana = User.objects.create(username="dana")
    generator = Generator.objects.create(name="old-gen", model_name_or_path="/m/g")
    Job.objects.create(kind="generalization_questions", generator=generator, created_by=dana)
    Dataset, Item, Source = (old.get_model("studies", m) for m in ("Dataset", "Item", "RationaleSource"))
    item = Item.objects.create(dataset=Dataset.objects.create(name="ds", task_format="yes_no"), external_id="i1",
                               question="Q?", gold_answer="yes")
    source = Source.objects.create(name="src")
    Source.objects.create(name="ckpt", kind="lm", backend="seq2seq", model_name_or_path="/m/ckpt")
    question = old.get_model("studies", "GeneralizationQuestion").objects.create(item=item, qtype="rephrase",
                                                                               text="Q2?", answer="yes")
    old.get_model("studies", "GenUPrediction").objects.create(
        generalization_question=question, rationale_source=source, answerer="I", answerer_model="/m/ckpt",
        correct=True)

    new = migrate_to(AFTER)
    assert list(new.get_model("studies", "QuestionGenerator").objects.values_list("name", "created_by")) == [
        ("old-gen", None)]
    assert list(new.get_model("studies", "GenUPrediction").objects.values_list("answerer_model", "answerer_source")) == [
        ("/m/ckpt", None)]
