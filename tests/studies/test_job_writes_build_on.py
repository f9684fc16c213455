"""An LM job that writes content under items (rationales, generalization questions, Gen-U
predictions) hangs its rows only from items its researcher may build on
(``studies.selectors.items_to_build_on``, the write rule of the admin's content forms and the
importers: ``studies.services.content.PARENT_SELECTORS``), not from every item they may read.

Before: such a job checked its items only with the read rule (``items_for_jobs``), so a researcher
holding only a VIEW share of another researcher's study started a rationale job (their own source)
or a question-generation job on that study's dataset and stored rows under the owner's items, which
the admin and the imports refuse. Now the job takes only the items its researcher may build on
(the others left out and counted, as the items they may not read are; given item ids refused), and
a row whose item (or source) is no longer one they may build on when it is stored is refused and
kept as a failure with why. A Gen-U job, whose predictions hang from the items' questions and its
source, goes by the same rule; jobs that only read items keep the read rule."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    Item,
    QuestionGenerator,
    Rationale,
    RationaleSource,
    StudyShare,
)
from studies.models.core import YES_NO_CHOICES
from studies.services.generation import GenerationError, generation_job_create, generation_job_run
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import RationaleFactory
from tests.studies.lm.openai_server import OpenAIServer, completion

pytestmark = pytest.mark.django_db

DEMOS = [{"question": f"Demo {i}?", "choices": ["yes", "no"], "answer": "yes", "rationale": "Demo reason.",
          "key": f"d{i}"} for i in range(6)]
QUESTION_DEMOS = {t: [{"question": f"Demo {i}?", "output": f"Is {t} demo {i} true?", "answer": "True"}
                      for i in range(6)] for t in ("rephrase", "similar", "counterfactual")}
RATIONALE_REPLY = " yes\nReason: Because the facts say so.\n###\nQuestion: next"
QUESTION_REPLY = " Is the sky blue on a clear day?\nAnswer: yes"


def _items(dataset: Dataset, prefix: str, n: int) -> list[Item]:
    return [Item.objects.create(dataset=dataset, split="test", external_id=f"{prefix}{i}",
                                question=f"{prefix} question {i}?", choices=YES_NO_CHOICES, gold_answer="yes")
            for i in range(n)]


@pytest.fixture
def lab():
    """Alice's study of her dataset (3 test items), listing her source. Bob (a researcher who reads
    only what the studies he may see use) has his own study of his own dataset, listing his own
    source; Alice shares her study with him to VIEW."""
    alice, _ = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    alice_ds = Dataset.objects.create(name="alice-ds", task_format="yes_no")
    alice_items = _items(alice_ds, "alice", 3)
    alice_src = RationaleSource.objects.create(name="alice-src", kind="imported")
    alice_study = study_create(name="alices-study", dataset=alice_ds, sources=[alice_src], owner=alice, user=alice,
                               consent_text="ok")
    bob_ds = Dataset.objects.create(name="bob-ds", task_format="yes_no")
    bob_items = _items(bob_ds, "bob", 2)
    bob_src = RationaleSource.objects.create(name="bob-src", kind="lm", backend="openai", model_name_or_path="gpt-x",
                                             endpoint_url="http://127.0.0.1:9/v1", demonstrations=DEMOS,
                                             decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1})
    study_create(name="bobs-study", dataset=bob_ds, sources=[bob_src], owner=bob, user=None, consent_text="ok")
    study_share(study=alice_study, user=alice, with_user=bob, level=StudyShare.Level.VIEW)
    return SimpleNamespace(alice=alice, bob=bob, alice_ds=alice_ds, alice_items=alice_items, alice_src=alice_src,
                           alice_study=alice_study, bob_ds=bob_ds, bob_items=bob_items, bob_src=bob_src)


def _hosted(lab, server) -> RationaleSource:
    """Bob's source, pointed at the test's local endpoint (the settings a job records)."""
    RationaleSource.objects.filter(pk=lab.bob_src.pk).update(endpoint_url=server.url)
    return RationaleSource.objects.get(pk=lab.bob_src.pk)


def _generator(lab, server) -> QuestionGenerator:
    return QuestionGenerator.objects.create(
        name="bobs-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
        demonstrations=QUESTION_DEMOS, decoding={"backoff_s": 0.01, "concurrency": 1}, created_by=lab.bob)


def _alice_rows() -> tuple[int, int]:
    return (Rationale.objects.filter(item__dataset__name="alice-ds").count(),
            GeneralizationQuestion.objects.filter(item__dataset__name="alice-ds").count())


def test_a_view_share_reader_starts_no_rationale_job_on_the_owners_items(lab):
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        source = _hosted(lab, server)
        with pytest.raises(GenerationError) as refused:
            generation_job_create(kind="rationales", source=source, dataset=lab.alice_ds, split="test", user=lab.bob,
                                  enqueue=False)
        assert "no items that you may build on in dataset 'alice-ds' split 'test'" in str(refused.value)
        assert "you may read 3 of its 3 items" in str(refused.value) and "shared with you to view" in str(refused.value)
        with pytest.raises(GenerationError) as refused:
            generation_job_create(kind="rationales", source=source, item_ids=[i.pk for i in lab.alice_items],
                                  user=lab.bob, enqueue=False)
        assert "3 of the 3 item ids given" in str(refused.value) and "build on" in str(refused.value)
    assert server.requests == [] and _alice_rows() == (0, 0)
    assert not GenerationJob.objects.exists()


def test_a_view_share_reader_starts_no_question_job_on_the_owners_items(lab):
    with OpenAIServer(lambda path, body: (200, completion([QUESTION_REPLY]), {})) as server:
        generator = _generator(lab, server)
        with pytest.raises(GenerationError, match="no items that you may build on in dataset 'alice-ds'"):
            generation_job_create(kind="generalization_questions", generator=generator, dataset=lab.alice_ds,
                                  split="test", user=lab.bob, enqueue=False, params={})
        with pytest.raises(GenerationError, match=r"1 of the 1 item ids given"):
            generation_job_create(kind="generalization_questions", generator=generator,
                                  item_ids=[lab.alice_items[0].pk], user=lab.bob, enqueue=False, params={})
    assert server.requests == [] and _alice_rows() == (0, 0)


def test_a_researchers_job_on_their_own_dataset_takes_all_its_items(lab):
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = generation_job_create(kind="rationales", source=_hosted(lab, server), dataset=lab.bob_ds, split="test",
                                    user=lab.bob, enqueue=False)
        assert job.total == 2 and "items_left_out" not in job.params
        job = generation_job_run(job_id=job.pk)
    assert (job.status, job.done, job.failed) == ("done", 2, 0)
    assert Rationale.objects.filter(source=lab.bob_src).count() == 2


def test_a_rationale_job_on_a_source_read_only_through_a_view_share_is_refused(lab):
    # Alice's study lists her LM source: Bob reads it through the share, but a rationale job hangs
    # its rationales from its source too, and this one is not his to add to (sources_for_design).
    RationaleSource.objects.filter(pk=lab.alice_src.pk).update(
        kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url="http://127.0.0.1:9/v1",
        demonstrations=DEMOS)
    with pytest.raises(GenerationError) as refused:
        generation_job_create(kind="rationales", source=RationaleSource.objects.get(pk=lab.alice_src.pk),
                              dataset=lab.bob_ds, split="test", user=lab.bob, enqueue=False)
    assert "rationale source 'alice-src'" in str(refused.value) and "build on" in str(refused.value)
    assert not GenerationJob.objects.exists()


def test_a_row_whose_item_is_no_longer_to_build_on_when_stored_is_kept_as_a_failure(lab):
    # Bob starts the job while Alice shares her study with him to CHANGE (he may build on her
    # dataset); she lowers the share to VIEW before it runs. He still reads the items (the job is
    # not cancelled), but the rationales are not his to add under them any more.
    study_share(study=lab.alice_study, user=lab.alice, with_user=lab.bob, level=StudyShare.Level.CHANGE)
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = generation_job_create(kind="rationales", source=_hosted(lab, server), dataset=lab.alice_ds,
                                    split="test", user=lab.bob, enqueue=False)
        assert job.total == 3
        study_share(study=lab.alice_study, user=lab.alice, with_user=lab.bob, level=StudyShare.Level.VIEW)
        job = generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    assert (job.done, job.failed) == (3, 3)
    assert _alice_rows() == (0, 0)
    reasons = list(GenerationFailure.objects.filter(job=job).values_list("reason", flat=True))
    assert len(reasons) == 3 and all("not stored" in r and "build on" in r for r in reasons), reasons


def test_a_question_whose_item_is_no_longer_to_build_on_when_stored_is_kept_as_a_failure(lab):
    study_share(study=lab.alice_study, user=lab.alice, with_user=lab.bob, level=StudyShare.Level.CHANGE)
    with OpenAIServer(lambda path, body: (200, completion([QUESTION_REPLY]), {})) as server:
        job = generation_job_create(kind="generalization_questions", generator=_generator(lab, server),
                                    dataset=lab.alice_ds, split="test", user=lab.bob, enqueue=False, params={})
        study_share(study=lab.alice_study, user=lab.alice, with_user=lab.bob, level=StudyShare.Level.VIEW)
        job = generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    assert _alice_rows() == (0, 0)
    refused = GenerationFailure.objects.filter(job=job)
    assert refused.exists() and all("not stored" in f.reason and "build on" in f.reason for f in refused)


def test_a_change_share_still_lets_its_collaborator_write_under_the_items(lab):
    study_share(study=lab.alice_study, user=lab.alice, with_user=lab.bob, level=StudyShare.Level.CHANGE)
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = generation_job_run(job_id=generation_job_create(
            kind="rationales", source=_hosted(lab, server), dataset=lab.alice_ds, split="test", user=lab.bob,
            enqueue=False).pk)
    assert (job.status, job.failed) == ("done", 0)
    assert _alice_rows() == (3, 0)


def test_a_genu_job_goes_by_the_build_on_rule_too(lab):
    # Gen-U predictions hang from the items' questions and the source, one per question, source and
    # answerer role, and the owner's studies score them: a view share reader's Gen-U job takes
    # neither her source nor her items (tests/studies/lm/test_genu_build_on_rights.py).
    for item in lab.alice_items:
        RationaleFactory(item=item, source=lab.alice_src, text="Alice's rationale.")
        GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Is {item.external_id} true?",
                                              answer="yes", origin="import", validation_status="valid")
    params = {"answerer_i": lab.bob_src.pk, "answerer_ir": lab.bob_src.pk}
    with pytest.raises(GenerationError, match="'alice-src' is not a source you may build on"):
        generation_job_create(kind="genu_answers", source=lab.alice_src, dataset=lab.alice_ds, split="test",
                              user=lab.bob, enqueue=False, params=params)
    with pytest.raises(GenerationError, match="no items that you may build on in dataset 'alice-ds' split 'test'"):
        generation_job_create(kind="genu_answers", source=lab.bob_src, dataset=lab.alice_ds, split="test",
                              user=lab.bob, enqueue=False, params=params)
    assert not GenerationJob.objects.exists()
