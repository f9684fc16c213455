"""A content row's deletion is judged by what it would delete with it too
(``studies.services.content.content_change_problems``): the rationales and generalization questions
of an item, the rationales of a source, the items of a dataset (and theirs). A row another
researcher's content depends on, content the user may not edit or delete itself, is not theirs to
delete: the service answers as the admin's delete page and delete action do, naming the row asked
for and never the other researcher's rows."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from studies.models import Dataset, GeneralizationQuestion, GenerationJob, Item, Rationale, RationaleSource
from studies.services.content import (
    ContentChangeRefused,
    ContentNotYours,
    content_change_problems,
    content_row_save,
    content_rows_delete,
)
from studies.services.studies import study_create
from tests.factories import staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab():
    """Alice (every permission but ``studies.view_rationalesource``) with her dataset of two items
    and her source, a rationale of it on each; Bob (every permission) adds, through the service, a
    rationale from his own source on her first item."""
    alice, alice_client = staff("alice")
    alice.user_permissions.remove(Permission.objects.get(content_type__app_label="studies",
                                                         codename="view_rationalesource"))
    alice = get_user_model().objects.get(pk=alice.pk)
    bob, _ = staff("bob")
    dataset = content_row_save(user=alice, obj=Dataset(name="alice-ds", task_format=Dataset.TaskFormat.YES_NO),
                               changed=())
    items = [content_row_save(user=alice, obj=Item(dataset=dataset, external_id=f"a{i}", question=f"Q{i}?",
                                                   choices=["yes", "no"], gold_answer="yes", split="test"),
                              changed=()) for i in range(2)]
    # Her source, which she uses through her draft study (she does not read every source).
    alice_src = content_row_save(user=None, obj=RationaleSource(name="alice-src", kind=RationaleSource.Kind.IMPORTED),
                                 changed=())
    study_create(name="alices-draft", dataset=dataset, sources=[alice_src], owner=alice, consent_text="I agree.")
    for item in items:
        content_row_save(user=alice, obj=Rationale(item=item, source=alice_src, text="Alice's.", predicted_answer="yes"),
                         changed=())
    bob_src = content_row_save(user=bob, obj=RationaleSource(name="bob-src", kind=RationaleSource.Kind.IMPORTED),
                               changed=())
    bobs = content_row_save(user=bob, obj=Rationale(item=items[0], source=bob_src, text="Bob's.",
                                                    predicted_answer="yes"), changed=())
    return alice, alice_client, bob, dataset, items, alice_src, bob_src, bobs


def test_an_item_under_which_another_researcher_wrote_is_not_deleted(lab):
    alice, alice_client, _, _, items, _, _, bobs = lab
    with pytest.raises(ContentNotYours, match=f"rationale {bobs.pk} is not yours to edit or delete"):
        content_rows_delete(user=alice, model=Rationale, pks=[bobs.pk])

    with pytest.raises(ContentNotYours) as refused:
        content_rows_delete(user=alice, model=Item, pks=[items[0].pk])
    message = str(refused.value)
    assert f"item {items[0].pk} is not yours to delete: another researcher's content depends on it" in message
    assert f"rationale {bobs.pk}" not in message and "bob" not in message
    assert Item.objects.filter(pk=items[0].pk).exists() and Rationale.objects.filter(pk=bobs.pk).exists()

    # The admin answers as the service does: its delete page and its delete action refuse.
    delete = reverse("admin:studies_item_delete", args=[items[0].pk])
    assert alice_client.post(delete, {"post": "yes"}).status_code == 403
    alice_client.post(reverse("admin:studies_item_changelist"),
                      {"action": "delete_selected", "_selected_action": [items[0].pk], "post": "yes"})
    assert Item.objects.filter(pk=items[0].pk).exists() and Rationale.objects.filter(pk=bobs.pk).exists()

    # Her other item, with only her own rationale under it, is hers to delete.
    content_rows_delete(user=alice, model=Item, pks=[items[1].pk])
    assert not Item.objects.filter(pk=items[1].pk).exists()


def test_a_dataset_and_a_source_are_judged_by_the_rows_they_would_take(lab):
    alice, _, bob, dataset, items, alice_src, bob_src, bobs = lab
    # (Her draft study on it keeps it too, PROTECT, but the rule answers first, as the admin does.)
    not_yours, _ = content_change_problems(user=alice, model=Dataset, changes={dataset.pk: None})
    assert set(not_yours) == {dataset.pk}
    assert not_yours[dataset.pk].startswith(f"dataset {dataset.pk} is not yours to delete: another researcher's")

    # Her source's rationales are hers, on her items: her source is hers to delete.
    assert content_change_problems(user=alice, model=RationaleSource, changes={alice_src.pk: None}) == ({}, {})
    # A cascaded row is judged as its own deletion is: a question hangs from its item alone, so one
    # Bob wrote on her item is hers to delete, and does not keep the item.
    question = content_row_save(user=bob, obj=GeneralizationQuestion(
        item=items[1], qtype=GeneralizationQuestion.Type.REPHRASE, text="Bob's question?", answer="yes"), changed=())
    assert content_change_problems(user=alice, model=GeneralizationQuestion, changes={question.pk: None}) == ({}, {})
    assert content_change_problems(user=alice, model=Item, changes={items[1].pk: None}) == ({}, {})

    # Bob's source, with his rationale on her item, is his to delete.
    assert content_change_problems(user=bob, model=RationaleSource, changes={bob_src.pk: None}) == ({}, {})


def _alice_with_her_source(lab):
    """(alice, who may also read sources, her client, her imported source "human")."""
    _, alice_client, _, _, _, _, _, _ = lab
    alice = get_user_model().objects.get(username="alice")
    alice.user_permissions.add(Permission.objects.get(content_type__app_label="studies",
                                                      codename="view_rationalesource"))
    alice = get_user_model().objects.get(pk=alice.pk)
    human = content_row_save(user=alice, obj=RationaleSource(name="human", kind=RationaleSource.Kind.IMPORTED),
                             changed=())
    return alice, alice_client, human


def test_a_job_on_one_dataset_keeps_none_of_another(lab):
    """A rationale deleted with its item or dataset stays only where an LM job used it: a job on
    (source, dataset) read that source's rationales of that dataset, not of her other datasets."""
    alice, alice_client, human = _alice_with_her_source(lab)
    datasets, items, rationales = [], [], []
    for n in (1, 2, 3):
        dataset = content_row_save(user=alice, obj=Dataset(name=f"d{n}", task_format=Dataset.TaskFormat.YES_NO),
                                   changed=())
        item = content_row_save(user=alice, obj=Item(dataset=dataset, external_id=f"d{n}-q", question=f"Q{n}?",
                                                     choices=["yes", "no"], gold_answer="yes", split="train"),
                                changed=())
        rationales.append(content_row_save(user=alice, obj=Rationale(item=item, source=human, text="Because.",
                                                                     predicted_answer="yes"), changed=()))
        datasets.append(dataset)
        items.append(item)
    # One fine-tune job on (human, d1), which failed: it read human's rationales of d1, and no other.
    job = GenerationJob.objects.create(kind=GenerationJob.Kind.FINETUNE, status=GenerationJob.Status.FAILED,
                                       source=human, dataset=datasets[0], created_by=alice)

    assert content_change_problems(user=alice, model=Dataset, changes={datasets[1].pk: None}) == ({}, {})
    assert content_change_problems(user=alice, model=Item, changes={items[1].pk: None}) == ({}, {})
    # What the job used stays: its dataset, that dataset's items, and (deleted by itself) any
    # rationale of the source it ran on, the direct clause as it was.
    _, fixed = content_change_problems(user=alice, model=Dataset, changes={datasets[0].pk: None})
    assert f"LM job {job.pk} ran on it" in fixed[datasets[0].pk]
    _, fixed = content_change_problems(user=alice, model=Item, changes={items[0].pk: None})
    assert f"LM job {job.pk} ran on its dataset" in fixed[items[0].pk]
    _, fixed = content_change_problems(user=alice, model=Rationale, changes={rationales[1].pk: None})
    assert f"LM job {job.pk} ran on its source" in fixed[rationales[1].pk]

    # The admin and the service delete d2's item and d3, with human's rationales of them.
    alice_client.force_login(alice)
    response = alice_client.post(reverse("admin:studies_item_delete", args=[items[1].pk]), {"post": "yes"})
    assert response.status_code == 302
    content_rows_delete(user=alice, model=Dataset, pks=[datasets[2].pk])
    assert not Item.objects.filter(pk__in=[items[1].pk, items[2].pk]).exists()
    assert not Rationale.objects.filter(pk__in=[rationales[1].pk, rationales[2].pk]).exists()
    assert Rationale.objects.filter(pk=rationales[0].pk).exists() and GenerationJob.objects.filter(pk=job.pk).exists()


def test_what_a_job_used_is_not_moved_off_what_it_ran_on(lab):
    """A row deleted with its parent is judged by where it hangs now, so a row an LM job used is not
    moved off what the job ran on (``_job_move_reasons``): an item a fine-tune job trained on, moved
    to another dataset, would have gone with that dataset, the rationale the job read with it."""
    alice, alice_client, human = _alice_with_her_source(lab)
    d1, d2 = (content_row_save(user=alice, obj=Dataset(name=name, task_format=Dataset.TaskFormat.YES_NO), changed=())
              for name in ("d1", "d2"))
    item, spare = (content_row_save(user=alice, obj=Item(dataset=d1, external_id=f"d1-{n}", question="Q?",
                                                         choices=["yes", "no"], gold_answer="yes", split="train"),
                                    changed=()) for n in (1, 2))
    other = content_row_save(user=alice, obj=Item(dataset=d2, external_id="d2-1", question="Q?",
                                                  choices=["yes", "no"], gold_answer="yes", split="train"), changed=())
    rationale = content_row_save(user=alice, obj=Rationale(item=item, source=human, text="Because.",
                                                           predicted_answer="yes"), changed=())
    free = content_row_save(user=alice, obj=Item(dataset=d2, external_id="d2-2", question="Q?",
                                                 choices=["yes", "no"], gold_answer="yes", split="train"), changed=())
    job = GenerationJob.objects.create(kind=GenerationJob.Kind.FINETUNE, status=GenerationJob.Status.DONE,
                                       source=human, dataset=d1, item_ids=[item.pk], created_by=alice)
    _, fixed = content_change_problems(user=alice, model=Dataset, changes={d1.pk: None})
    assert f"LM job {job.pk} ran on it" in fixed[d1.pk]

    item.dataset = d2
    with pytest.raises(ContentChangeRefused, match=f"dataset of item {item.pk} cannot change: LM job {job.pk} ran "
                                                   "on its dataset, and what an LM job used stays where"):
        content_row_save(user=alice, obj=item, changed=["dataset"])
    rationale.item = other
    with pytest.raises(ContentChangeRefused, match=f"item of rationale {rationale.pk} cannot change: LM job "
                                                   f"{job.pk} ran on its source and its item's dataset"):
        content_row_save(user=alice, obj=rationale, changed=["item"])
    # The admin's change page answers beside the form, with what was typed.
    response = alice_client.post(reverse("admin:studies_item_change", args=[spare.pk]), {
        "dataset": d2.pk, "external_id": "d1-2", "question": "Q?", "choices": '["yes", "no"]',
        "gold_answer": "yes", "gold_rationale": "", "split": "train", "metadata": "{}", "initial-metadata": "{}"})
    assert response.status_code == 200
    assert f"dataset of item {spare.pk} cannot change: LM job {job.pk} ran on its dataset" in response.content.decode()

    # Nothing moved, so d2 goes without what the job used; d1 stays with it.
    assert Item.objects.get(pk=item.pk).dataset_id == d1.pk
    assert Rationale.objects.get(pk=rationale.pk).item_id == item.pk
    content_rows_delete(user=alice, model=Dataset, pks=[d2.pk])
    assert Rationale.objects.filter(pk=rationale.pk).exists() and Item.objects.filter(pk=item.pk).exists()

    # A row no job used moves as before.
    d3 = content_row_save(user=alice, obj=Dataset(name="d3", task_format=Dataset.TaskFormat.YES_NO), changed=())
    assert not Item.objects.filter(pk=free.pk).exists()
    loose = content_row_save(user=alice, obj=Item(dataset=d3, external_id="d3-1", question="Q?",
                                                  choices=["yes", "no"], gold_answer="yes", split="train"), changed=())
    d4 = content_row_save(user=alice, obj=Dataset(name="d4", task_format=Dataset.TaskFormat.YES_NO), changed=())
    loose.dataset = d4
    content_row_save(user=alice, obj=loose, changed=["dataset"])
    assert Item.objects.get(pk=loose.pk).dataset_id == d4.pk
