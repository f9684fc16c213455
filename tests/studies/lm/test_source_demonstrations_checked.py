"""A rationale source's own demonstrations are checked where the source is written and where a job
takes them: before, ``["not an object"]`` or choices that are no list were saved, the job was made,
and its first batch failed with a raw ``AttributeError`` or ``TypeError`` (for every researcher's
job on that source). A demonstration without choices (a yes/no one) is read as such, as before."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from studies.models import RationaleSource
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.openai_server import OpenAIServer, completion

pytestmark = pytest.mark.django_db

YES_NO_DEMO = {"question": "Is ice cold?", "answer": "yes", "rationale": "Ice is frozen water."}


def _source(url: str, demonstrations) -> RationaleSource:
    return RationaleSource(name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=url,
                           decoding={"backoff_s": 0.01, "concurrency": 1}, demonstrations=demonstrations)


@pytest.mark.parametrize(("demonstrations", "reason"), [
    (["not an object"], "Demonstration 1 must be an object"),
    ([YES_NO_DEMO, {**YES_NO_DEMO, "choices": "yes, no"}], 'Demonstration 2: "choices" must be a list of texts'),
    ([{**YES_NO_DEMO, "rationale": ""}], 'Demonstration 1: "rationale" must be a non-empty text'),
    ({"question": "q"}, "Must be a list of demonstrations"),
], ids=["string", "choices-text", "empty-rationale", "object"])
def test_demonstrations_a_job_cannot_read_are_refused_on_the_source_and_by_a_job(demonstrations, reason):
    dataset = DatasetFactory(name="d")
    for _ in range(2):
        ItemFactory(dataset=dataset, split="dev")
    source = _source("https://lm.example/v1", demonstrations)
    with pytest.raises(ValidationError) as refused:
        source.full_clean()
    assert reason in refused.value.message_dict["demonstrations"][0]
    source.save()  # stored before the check (or written around it): a job is refused, naming it
    with pytest.raises(GenerationError, match="its demonstrations"):
        generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=None,
                              enqueue=False)


def test_yes_no_demonstrations_without_choices_run():
    dataset = DatasetFactory(name="d")
    for _ in range(2):
        ItemFactory(dataset=dataset, split="dev")
    with OpenAIServer(lambda path, body: (200, completion([" yes\nReason: because.\n###"]), {})) as server:
        # a field the reader does not use (an item id a file carried) is kept, as before
        source = _source(server.url, [YES_NO_DEMO, {**YES_NO_DEMO, "choices": ["yes", "no"], "key": 3, "item_id": 7}])
        source.full_clean()
        source.save()
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=None,
                                    enqueue=False)
        generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.done, job.failed) == ("done", 2, 0)
    assert "Is ice cold?" in str(server.requests[0])


def test_a_quark_policy_takes_the_demonstrations_rule_and_reads_yes_no_ones():
    """A Quark job's causal policy prompts with its source's demonstrations as a rationale job does:
    one saved before the rule is refused as the job is made (it failed at the first batch), and a
    yes/no demonstration without choices is read as one (a TypeError before)."""
    from studies.models import GenerationJob
    from studies.services.generation.quark_policy import PolicyPrompts, resolve_policy

    dataset = DatasetFactory(name="d")
    item = ItemFactory(dataset=dataset, split="dev")
    RationaleSource.objects.create(name="legacy", kind="lm", backend="causal", model_name_or_path="gpt2-tiny",
                                   demonstrations=["not an object"])  # saved before the rule
    with pytest.raises(GenerationError, match="policy 'legacy': its demonstrations demonstration 1 must be an object"):
        generation_job_create(kind="quark", dataset=dataset, split="dev", user=None, enqueue=False,
                              params={"reward": "marker:is", "policy_path": "legacy"})
    assert not GenerationJob.objects.exists()

    RationaleSource.objects.create(name="yes-no", kind="lm", backend="causal", model_name_or_path="gpt2-tiny",
                                   demonstrations=[YES_NO_DEMO])
    prompts = PolicyPrompts(resolve_policy("yes-no", dataset=dataset), [item.pk])
    assert "Is ice cold?" in prompts.prompt(item.pk, None)


@pytest.mark.parametrize(("demonstrations", "reason"), [
    ({"rephrase": "Q? -> Is it?"}, "the rephrase demonstrations must be a list"),
    ({"rephrase": ["Q?"]}, "Rephrase demonstration 1 must be an object"),
    ({"similar": [{"question": "Q?", "output": "", "answer": "True"}]}, 'Similar demonstration 1: "output" must be'),
    ({"counterfactual": [{"question": "Q?", "output": "O?", "answer": ["True"]}]}, '"answer" must be a text'),
], ids=["not-a-list", "string", "empty-output", "answer-list"])
def test_a_question_generators_demonstrations_a_job_cannot_read_are_refused(demonstrations, reason):
    """As a source's: before, a generator saved with these made a job that failed at its first batch
    (``QuestionDemo.from_json`` read each with ``.get``)."""
    from studies.models import QuestionGenerator

    dataset = DatasetFactory(name="d", task_format="yes_no")
    ItemFactory(dataset=dataset, split="dev")
    generator = QuestionGenerator(name="asker", backend="causal", model_name_or_path="tiny",
                                  demonstrations=demonstrations)
    with pytest.raises(ValidationError) as refused:
        generator.full_clean()
    assert reason.lower() in refused.value.message_dict["demonstrations"][0].lower()
    generator.save()  # stored before the rule
    with pytest.raises(GenerationError, match="generator 'asker': its demonstrations"):
        generation_job_create(kind="generalization_questions", generator=generator, dataset=dataset, split="dev",
                              user=None, enqueue=False)


def test_question_demonstrations_a_job_reads_as_before_are_kept():
    """A true/false answer (written True/False), keys that are not question types (a note) and
    demonstrations that are no object (not read: drawn instead) pass, as they worked before."""
    from studies.lm import templates
    from studies.models import QuestionGenerator

    demos = {"about": "from our pilot", "rephrase": [{"question": "Q?", "output": "O?", "answer": True, "context": "c"}]}
    QuestionGenerator(name="g", backend="causal", model_name_or_path="tiny", demonstrations=demos).full_clean()
    prompt = templates.generalization_prompt(
        "rephrase", instruction="I", demonstrations=[templates.QuestionDemo.from_json(demos["rephrase"][0])],
        question="Is grass green?")
    assert "True" in prompt
    with pytest.raises(ValidationError, match="Must be an object of question types"):  # the admin says so
        QuestionGenerator(name="h", backend="causal", model_name_or_path="tiny", demonstrations=["a"]).full_clean()
    dataset = DatasetFactory(name="d", task_format="yes_no")
    ItemFactory(dataset=dataset, split="dev")
    odd = QuestionGenerator.objects.create(name="odd", backend="causal", model_name_or_path="tiny",
                                           demonstrations=["stored", "before"])
    with pytest.raises(GenerationError) as refused:  # it goes on to draw them, as before (none here to draw)
        generation_job_create(kind="generalization_questions", generator=odd, dataset=dataset, split="dev", user=None,
                              enqueue=False)
    assert "no demonstrations for type 'rephrase'" in str(refused.value)
