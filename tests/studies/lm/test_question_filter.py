"""The generalization-question filter keeps what people keep and stores what it drops: measured on
the released test questions, taken as the validated set (our reading of SPEC section 4; read from
../shared/data, never copied), and through a
question job against a local OpenAI-compatible server (no model needed)."""
import json
from collections import Counter

import pytest

from studies.lm import templates
from studies.lm.parsing import question_problem
from studies.lm.questions import Candidate, filter_questions, normalise
from studies.models import DroppedQuestion, GeneralizationQuestion, GenerationFailure, QuestionGenerator
from studies.services import generation
from tests.studies.lm.conftest import make_items

from .openai_server import OpenAIServer, completion


def released_filter_outcome(generalisation: dict) -> tuple[int, list[tuple[str, str, str]]]:
    """Run every released validated question through the parser's question check and the filter,
    (original, type) by (original, type) as a job meets its samples. A question counts as kept when
    its text is among the kept ones of its (original, type): a repeat of a kept text loses nothing.
    Returns (questions, [(reason, type, text) of each question not kept])."""
    total, lost = 0, []
    for original, rows in generalisation.items():
        for qtype in templates.QUESTION_TYPES:
            texts = [" ".join(text.split()) for text, _, t in rows if t == qtype]
            total += len(texts)
            parsed = [Candidate(text=t, answer="", raw=t, index=i) for i, t in enumerate(texts)
                      if not question_problem(t)]
            kept, _ = filter_questions(parsed, original=original)
            kept_keys = {normalise(c.text) for c in kept}
            for text in texts:
                if normalise(text) in kept_keys:
                    continue
                problem = question_problem(text)
                reason = "not a question" if problem else (
                    "duplicate_of_original" if normalise(text) == normalise(original) else "other")
                lost.append((reason, qtype, text))
    return total, lost


def test_filter_keeps_the_validated_test_questions_but_copies_of_the_original_and_non_questions(strategyqa_dir):
    generalisation = json.loads((strategyqa_dir / "generalisation_final_test.json").read_text())
    total, lost = released_filter_outcome(generalisation)
    reasons = Counter(reason for reason, _, _ in lost)
    kept_share = 1 - len(lost) / total
    print(f"\nreleased validated test questions: {total}; kept {total - len(lost)} ({kept_share:.2%}); "
          f"not kept: {dict(reasons)}; by type: {dict(Counter(t for _, t, _ in lost))}")
    assert total == 2608
    # Only two kinds of loss: the original question itself again, and text that is no question.
    assert set(reasons) <= {"duplicate_of_original", "not a question"}
    assert reasons["not a question"] <= 15 and kept_share >= 0.975
    # What a person accepts as a new question (everything but the original word for word): 99% kept.
    new_questions = total - reasons["duplicate_of_original"]
    assert (new_questions - reasons["not a question"]) / new_questions >= 0.99


def _demonstrations() -> dict:
    demo = templates.QuestionDemo(question="Is the sky blue?", output="Is the sea blue?", answer="True",
                                  context="The sky is blue.")
    return {t: [demo.as_json()] * templates.N_DEMONSTRATIONS for t in templates.QUESTION_TYPES}


@pytest.mark.django_db
def test_question_job_stores_every_dropped_sample_with_its_reason(strategyqa_dataset, strategyqa_dev_rows,
                                                                   admin_client):
    item = make_items(strategyqa_dataset, strategyqa_dev_rows[:1], "dev")[0]
    original = item.question
    # A counterfactual that changes one word of the original is what a counterfactual is.
    words = original.rstrip("?").split()
    minimal_edit = " ".join(words[:-1] + ["Zanzibar"]) + "?"
    samples = {
        "rephrase": [f"{original.upper().replace('?', ' ?')}\nanswer: True", f"Is it so that {original}\nanswer: True"],
        "similar": ["Is the sea blue?\nanswer: True", "is the SEA blue\nanswer: True"],
        "counterfactual": [f"{minimal_edit}\nanswer: False", "no question here\nanswer: True"],
    }

    def reply(path, body):
        qtype = next(t for t in templates.QUESTION_TYPES if body["prompt"].startswith(templates.DEFAULT_INSTRUCTIONS[t]))
        return 200, completion(samples[qtype]), {}

    with OpenAIServer(reply) as server:
        generator = QuestionGenerator.objects.create(
            name="scripted", backend="openai", model_name_or_path="scripted", endpoint_url=server.url,
            demonstrations=_demonstrations(), decoding={"num_return_sequences": 2, "max_new_tokens": 40})
        job = generation.generation_job_create(kind="generalization_questions", generator=generator,
                                               dataset=strategyqa_dataset, split="dev", enqueue=False)
        job = generation.generation_job_run(job_id=job.pk)

    assert job.status == "done"
    kept = dict(GeneralizationQuestion.objects.filter(item=item).values_list("qtype", "text"))
    assert kept == {"rephrase": f"Is it so that {original}", "similar": "Is the sea blue?",
                    "counterfactual": minimal_edit}
    dropped = {(d.qtype, d.sample_index): (d.reason, d.matched, d.text)
               for d in DroppedQuestion.objects.filter(job=job)}
    assert dropped == {
        ("rephrase", 0): ("duplicate_of_original", original, original.upper().replace("?", " ?")),
        ("similar", 1): ("repeat", "Is the sea blue?", "is the SEA blue"),
    }
    assert job.params["dropped"] == {"duplicate_of_original": 1, "repeat": 1}
    # The sample that is no question is a failure with its raw output, as before.
    assert GenerationFailure.objects.get(job=job).unit == "counterfactual#1"
    # The job's page says how many were dropped and why, and links to them.
    page = admin_client.get(f"/admin/studies/generationjob/{job.pk}/change/").content.decode()
    assert "2 dropped samples" in page and "the original question again" in page
    listing = admin_client.get(f"/admin/studies/droppedquestion/?job__id__exact={job.pk}").content.decode()
    assert "is the SEA blue" in listing and "a question of this type the item already has" in listing
