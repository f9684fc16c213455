"""A Gen-U job adds predictions only under items and a source its researcher may build on.

One Gen-U prediction is kept per (question, source, answerer role), and every study on those items
and that source computes its Gen-U from them. A reader of a view share could start a Gen-U job on
the owner's source and items that no study of hers used together yet: its predictions (answered by
any endpoint the reader chose) were stored under her questions, refused her own Gen-U job on them
afterwards ("already have Gen-U predictions ... from other answerers") and were what her next study
on them would score. Rationale and question jobs already took only what their researcher may build
on; a Gen-U job now does too, at creation (``source_to_build_on_check``, ``build_on`` items) and
at each batch's store (``content.gen_u_parent_refusals``: a share lowered to view meanwhile).
"""
from __future__ import annotations

import pytest

from studies.models import GenerationFailure, GenerationJob, GenUPrediction, RationaleSource, StudyShare
from studies.services.generation import GenerationError, generation_job_create, generation_job_run
from studies.services.questions import generalization_questions_set_validation
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory

from .openai_server import OpenAIServer, completion

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab():
    """Alice's dataset (two test and two dev items, a valid generalization question on each test
    item), her source s1 listed by her study on the test items and her source s2 (rationales of every
    item) by her study on the dev items: no study uses s2 on the test items yet. Bob reads only what
    his studies and the ones shared with him use."""
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    dataset = DatasetFactory(name="alice-ds")
    test = [ItemFactory(dataset=dataset, split="test", external_id=f"t{i}") for i in range(2)]
    dev = [ItemFactory(dataset=dataset, split="dev", external_id=f"d{i}") for i in range(2)]
    s1, s2 = RationaleSourceFactory(name="alice-s1"), RationaleSourceFactory(name="alice-s2")
    for item in test + dev:
        RationaleFactory(item=item, source=s2)
    generalization_questions_set_validation(questions=[
        item.generalization_questions.create(qtype="rephrase", text=f"Really {item.external_id}?", answer="yes")
        for item in test], status="valid")
    on_test = study_create(name="a-test", dataset=dataset, split="test", sources=[s1], owner=alice, user=None,
                           consent_text="ok")
    on_dev = study_create(name="a-dev", dataset=dataset, split="dev", sources=[s2], owner=alice, user=None,
                          consent_text="ok")
    return {"alice": alice, "bob": bob, "dataset": dataset, "s2": s2, "studies": [on_test, on_dev]}


def _share(lab, level):
    for study in lab["studies"]:
        study_share(study=study, user=lab["alice"], with_user=lab["bob"], level=level)


def _answerer(server, owner) -> RationaleSource:
    """An answerer ``owner`` reads (his own study lists it), served by ``server``."""
    answerer = RationaleSource.objects.create(
        name=f"{owner.username}-answerer", kind="lm", backend="openai", model_name_or_path="gpt-x",
        endpoint_url=server.url, decoding={"backoff_s": 0.01, "concurrency": 1})
    own = DatasetFactory(name=f"{owner.username}-ds")
    ItemFactory(dataset=own, split="test")
    study_create(name=f"{owner.username}-study", dataset=own, sources=[answerer], owner=owner, user=None,
                 consent_text="ok")
    return answerer


def _genu_job(lab, answerer, user):
    return generation_job_create(kind="genu_answers", source=lab["s2"], dataset=lab["dataset"], split="test",
                                 user=user, enqueue=False,
                                 params={"answerer_i": answerer.pk, "answerer_ir": answerer.pk})


def test_a_view_shares_reader_may_not_start_a_genu_job_on_the_owners_source(lab):
    _share(lab, StudyShare.Level.VIEW)
    with OpenAIServer(lambda path, body: (200, completion([" no"]), {})) as server:
        answerer = _answerer(server, lab["bob"])
        with pytest.raises(GenerationError, match="'alice-s2' is not a source you may build on"):
            _genu_job(lab, answerer, lab["bob"])
    assert not GenerationJob.objects.exists() and not GenUPrediction.objects.exists()


def test_a_genu_job_whose_share_was_lowered_to_view_stores_nothing_and_says_why(lab):
    _share(lab, StudyShare.Level.CHANGE)  # he may build on her dataset and s2 while he may change her studies
    with OpenAIServer(lambda path, body: (200, completion([" no"]), {})) as server:
        answerer = _answerer(server, lab["bob"])
        job = _genu_job(lab, answerer, lab["bob"])
        assert job.total == 2
        _share(lab, StudyShare.Level.VIEW)  # he still reads all of it, and builds on none of it
        job = generation_job_run(job_id=job.pk)

    assert (job.status, job.done, job.failed) == ("done", 2, 2), job.error
    assert not GenUPrediction.objects.exists()
    reasons = list(GenerationFailure.objects.filter(job=job).values_list("reason", flat=True))
    assert len(reasons) == 2 and all(
        r.startswith("not stored: this Gen-U prediction would hang from an item (or source) that you may no longer "
                     "build on") for r in reasons)

    # Alice's own Gen-U job on her questions is not held up by anything of his.
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        hers = generation_job_run(job_id=_genu_job(lab, _answerer(server, lab["alice"]), lab["alice"]).pk)
    assert (hers.status, hers.done, hers.failed) == ("done", 2, 0), hers.error
    assert GenUPrediction.objects.filter(rationale_source=lab["s2"]).count() == 4
