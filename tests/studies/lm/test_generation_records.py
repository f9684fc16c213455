"""What generated rationales and generalization questions record about how they were made: the
question generator's instruction and demonstrations (frozen in the job, as a rationale job
freezes its demonstrations), the default counterfactual instruction in the authors' words, and
for rationales the dtype, library versions, OpenAI ``api`` and the whole few-shot template."""
import hashlib
import json

import pytest

from studies.lm import templates
from studies.models import GeneralizationQuestion, QuestionGenerator, Rationale, RationaleSource
from studies.services import generation
from studies.services.generation.common import prompt_item

from .conftest import question_demos
from .openai_server import OpenAIServer, chat, completion
from .test_services_generation import import_train_questions, rationale_job, t5_source

pytestmark = [pytest.mark.lm, pytest.mark.django_db]

# SPEC section 4, the authors' counterfactual prompt, word for word.
SPEC_COUNTERFACTUAL = "Given the context and question, generate a question that negates the question."
OWN_QUESTION = {"rephrase": "Would a whale fit in a bathtub?", "similar": "Can penguins fly over mountains?",
                "counterfactual": "Does ice sink in liquid water?"}


def sha256_of(demonstrations: list[dict]) -> str:
    return hashlib.sha256(json.dumps(demonstrations, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def question_type_of(prompt: str, instructions: dict[str, str]) -> str:
    return next(qtype for qtype, text in instructions.items() if prompt.startswith(text + "\n\n"))


def run_question_job(train_items, generalisation, dataset, *, edit_after_create=None, **generator_fields):
    """A hosted generator that answers each type's prompt with a question of that type; returns
    (job, the prompts the endpoint received)."""
    import_train_questions(train_items, generalisation)
    with OpenAIServer(lambda path, body: (200, completion(["placeholder"]), {})) as server:
        generator = QuestionGenerator.objects.create(
            name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"num_return_sequences": 1, "backoff_s": 0.01}, **generator_fields)
        job = generation.generation_job_create(kind="generalization_questions", generator=generator,
                                               dataset=dataset, split="dev", limit=2, enqueue=False)
        instructions = dict(job.params["instructions"])

        def reply(path, body):
            text = OWN_QUESTION[question_type_of(body["prompt"], instructions)]
            return 200, completion([f"{text}\nanswer: False"]), {}

        server.reply = reply
        if edit_after_create:
            edit_after_create(generator, job)
        job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    return job, [r["json"]["prompt"] for r in server.requests]


def test_each_question_records_the_instruction_and_the_jobs_frozen_demonstrations(
        dev_items, train_items, strategyqa_dataset, strategyqa_generalisation):
    def edit(generator, job):  # the researcher edits the prompts in the admin while the job waits
        generator.instructions = {t: f"Edited {t} instruction." for t in templates.QUESTION_TYPES}
        generator.demonstrations = {t: [{"question": "Q?", "output": "Edited?", "answer": "True", "context": "c"}]
                                    for t in templates.QUESTION_TYPES}
        generator.save()

    job, prompts = run_question_job(train_items, strategyqa_generalisation, strategyqa_dataset,
                                    edit_after_create=edit)
    frozen_demos, frozen_instructions = job.params["demonstrations"], job.params["instructions"]
    assert set(frozen_demos) == set(frozen_instructions) == set(templates.QUESTION_TYPES)
    assert all(len(frozen_demos[t]) == templates.N_DEMONSTRATIONS for t in templates.QUESTION_TYPES)
    assert frozen_instructions == templates.DEFAULT_INSTRUCTIONS  # the generator's, as the job was created
    # The job prompted with what it froze, not with the later edit.
    assert len(prompts) == 2 * 3 and not any("Edited" in p for p in prompts)
    for prompt in prompts:
        qtype = question_type_of(prompt, frozen_instructions)
        for demo in frozen_demos[qtype]:
            assert demo["output"] in prompt

    questions = list(GeneralizationQuestion.objects.filter(origin="generator:hosted-questions"))
    assert {q.qtype for q in questions} == set(templates.QUESTION_TYPES)
    for q in questions:
        assert q.metadata["instruction"] == frozen_instructions[q.qtype]
        assert q.metadata["demonstrations_sha256"] == sha256_of(frozen_demos[q.qtype])
        assert "demonstrations" not in q.metadata  # the job holds the one copy
        assert (q.metadata["api"], q.metadata["device"]) == ("completions", "remote")


def test_a_job_created_before_prompts_were_frozen_records_the_demonstrations_it_used(
        dev_items, train_items, strategyqa_dataset, strategyqa_generalisation, strategyqa_train_rows):
    def unfreeze(generator, job):
        job.params = {k: v for k, v in job.params.items() if k not in ("demonstrations", "instructions")}
        job.save(update_fields=["params"])

    # Such a job read its generator's demonstrations (those jobs saved their draw there).
    own = {t: [d.as_json() for d in demos]
           for t, demos in question_demos(strategyqa_train_rows, strategyqa_generalisation).items()}
    run_question_job(train_items, strategyqa_generalisation, strategyqa_dataset, edit_after_create=unfreeze,
                     demonstrations=own)
    generator = QuestionGenerator.objects.get(name="hosted-questions")
    for q in GeneralizationQuestion.objects.filter(origin="generator:hosted-questions"):
        assert q.metadata["demonstrations"] == generator.demonstrations[q.qtype]
        assert q.metadata["demonstrations_sha256"] == sha256_of(generator.demonstrations[q.qtype])
        assert q.metadata["instruction"] == generator.instructions[q.qtype]


def test_the_default_counterfactual_instruction_is_the_authors_and_the_answer_still_parses(
        dev_items, train_items, strategyqa_dataset, strategyqa_generalisation):
    assert templates.DEFAULT_INSTRUCTIONS[templates.COUNTERFACTUAL] == SPEC_COUNTERFACTUAL
    job, prompts = run_question_job(train_items, strategyqa_generalisation, strategyqa_dataset)
    counterfactual = [p for p in prompts if p.startswith(SPEC_COUNTERFACTUAL + "\n\n")]
    assert len(counterfactual) == 2
    # The demonstrations carry the answer line, so the LM is still shown to answer.
    assert all(p.count("\nanswer: ") == templates.N_DEMONSTRATIONS for p in counterfactual)
    stored = GeneralizationQuestion.objects.filter(origin="generator:hosted-questions", qtype="counterfactual")
    assert stored.count() == 2 and set(stored.values_list("answer", flat=True)) == {"no"}
    assert {q.metadata["instruction"] for q in stored} == {SPEC_COUNTERFACTUAL}


def test_rationales_record_the_dtype_and_library_versions_of_a_local_model(
        lm_models, dev_items, strategyqa_dataset):
    torch = pytest.importorskip("torch")
    import transformers

    source = t5_source(lm_models)
    job = generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=2).pk)
    assert job.status == "done", job.error
    for r in Rationale.objects.filter(source=source):
        info = r.generation_info
        assert (info["device"], info["dtype"]) == ("cpu", "float32")
        assert (info["torch"], info["transformers"]) == (torch.__version__, transformers.__version__)
        assert info["template_text"] == templates.T5_EXPLAIN


def test_rationales_record_the_openai_api_and_the_whole_few_shot_template(
        dev_items, train_items, strategyqa_dataset):
    reply = " yes\nReason: Because the facts say so.\n###"
    with OpenAIServer(lambda path, body: (200, chat([reply]), {})) as server:
        source = RationaleSource.objects.create(
            name="hosted-chat", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": 40, "backoff_s": 0.01, "api": "chat"})
        job = generation.generation_job_run(job_id=rationale_job(source, strategyqa_dataset, limit=2).pk)
    assert job.status == "done", job.error
    sent = {r["json"]["messages"][0]["content"] for r in server.requests}
    assert all(r["path"].endswith("/chat/completions") for r in server.requests)
    demos = [templates.Demonstration(**d) for d in job.params["demonstrations"]]
    rationales = list(Rationale.objects.filter(source=source).select_related("item__dataset"))
    assert len(rationales) == 2
    for r in rationales:
        info = r.generation_info
        assert (info["api"], info["device"]) == ("chat", "remote")
        assert info["template_text"] == templates.CAUSAL_FEW_SHOT
        assert info["demonstration_template"] == templates.CAUSAL_BLOCK
        # The recorded template, filled with the job's demonstrations, is the prompt that was sent.
        assert templates.causal_prompt(prompt_item(r.item), demos, info["template_text"]) in sent
