"""A job reads, sends and trains on the items its researcher's jobs may read (``items_for_jobs``):
those a study they read shows, and those no study shows in a dataset they may build on
(``datasets_for_design``). The same rule holds

- while a fine-tuning job trains: it records which items it trains on (``train_item_ids``) and is
  stopped, registering nothing, once its researcher may no longer read them (a change share on
  the study that lent them the dataset lowered to view); the message says the dataset is no
  longer one they may build on, not that the items left a study;
- for the train items a rationales job draws its demonstrations from: they go to the same endpoint
  as the job's items, so a researcher who may fine-tune on her dataset's train split draws her
  demonstrations from it, while a view-share reader draws none of the owner's unshown train items.
"""
import pytest
from django.contrib.auth import get_user_model

from studies.models import GenerationJob, Item, RationaleSource
from studies.selectors import items_for_jobs
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.lifecycle import job_goes_on
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
JOB_PERMS = ("studies.add_generationjob", "studies.view_generationjob")


def _bobs_dataset():
    """Bob's dataset (3 dev, 2 test, 6 train items with gold rationales) and his study on its test
    split: the dev and train items no study shows."""
    User = get_user_model()
    bob = User.objects.create_user(username="bob", password="pw", is_staff=True)
    ds = DatasetFactory(name="bobs-private")
    for _ in range(3):
        ItemFactory(dataset=ds, split="dev")
    for _ in range(2):
        ItemFactory(dataset=ds, split="test")
    _train_pool(ds)
    study = study_create(name="bobs-study", dataset=ds, split="test", owner=bob, user=None, consent_text="ok",
                         sources=[RationaleSource.objects.create(name="bob-imported", kind="imported")])
    return bob, ds, study


def _finetune(alice, ds):
    return generation_job_create(kind="finetune", dataset=ds, split="train", user=alice, enqueue=False,
                                 params={"mode": "rationalizer", "base_model": "t5-small", "output_name": "alice-ft"})


@pytest.fixture
def lowered():
    """Alice (change share on Bob's study, studies.change_study) fine-tunes on the train split of
    Bob's dataset; returns a function that lowers her share to view."""
    User = get_user_model()
    bob, ds, study = _bobs_dataset()
    alice = grant(User.objects.create_user(username="alice", password="pw", is_staff=True), *JOB_PERMS,
                  "studies.change_study", "studies.view_rationalesource")
    study_share(study=study, user=bob, with_user=alice, level="change")
    alice = User.objects.get(pk=alice.pk)

    def lower():
        study_share(study=study, user=bob, with_user=alice, level="view")
        assert items_for_jobs(user=User.objects.get(pk=alice.pk)).filter(dataset=ds, split="train").count() == 0

    return alice, ds, lower


def test_a_finetune_job_stops_once_its_training_items_are_no_longer_its_researchers(lowered):
    alice, ds, lower = lowered
    job = _finetune(alice, ds)
    assert job.params["data"]["items"] == 6
    assert job_goes_on(job.pk)
    lower()
    assert not job_goes_on(job.pk)
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert "6 of the job's 6 training items" in job.error
    # the reason is the dataset, not a study: no study ever showed these items
    assert f"6 in no study, in dataset {ds.pk} 'bobs-private', no longer a dataset you may build on" in job.error
    assert "no longer in a study you may read" not in job.error


def test_a_finetune_job_created_before_its_training_items_were_recorded_is_checked_by_their_number(lowered):
    alice, ds, lower = lowered
    job = _finetune(alice, ds)
    params = {k: v for k, v in job.params.items() if k != "train_item_ids"}
    GenerationJob.objects.filter(pk=job.pk).update(params=params)
    assert job_goes_on(job.pk)
    lower()
    assert not job_goes_on(job.pk)
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert "6 of the job's 6 training items are no longer yours to read" in job.error


def _hosted(name):
    return RationaleSource.objects.create(name=name, kind="lm", backend="openai", model_name_or_path="m",
                                          endpoint_url=f"https://{name}.example/v1")


def test_a_researcher_draws_demonstrations_from_the_train_items_she_may_fine_tune_on():
    """Priya has no view_item or view_dataset; her own study on her dataset's test split lets her
    jobs read its unshown dev and train items: her rationales job on dev draws its six
    demonstrations from her train items, as her fine-tuning job trains on them."""
    User = get_user_model()
    priya = grant(User.objects.create_user(username="priya", password="pw", is_staff=True), *JOB_PERMS,
                  "studies.change_study")
    ds = DatasetFactory(name="priyas")
    for _ in range(3):
        ItemFactory(dataset=ds, split="dev")
    for _ in range(2):
        ItemFactory(dataset=ds, split="test")
    _train_pool(ds)
    src = _hosted("priya")
    study_create(name="priya-own", dataset=ds, split="test", owner=priya, user=None, consent_text="ok", sources=[src])
    priya = User.objects.get(pk=priya.pk)
    assert _finetune(priya, ds).params["data"]["items"] == 6
    job = generation_job_create(kind="rationales", source=src, dataset=ds, split="dev", user=priya, enqueue=False)
    assert job.total == 3
    train_keys = set(Item.objects.filter(dataset=ds, split="train").values_list("external_id", flat=True))
    assert {d["key"] for d in job.params["demonstrations"]} == train_keys
    assert "items_for_jobs" in job.params["demonstrations_from"]


def test_a_view_share_reader_draws_no_demonstration_from_the_owners_unshown_train_items():
    User = get_user_model()
    bob, ds, study = _bobs_dataset()
    carol = grant(User.objects.create_user(username="carol", password="pw", is_staff=True), *JOB_PERMS,
                  "studies.view_rationalesource")
    study_share(study=study, user=bob, with_user=carol, level="view")
    carol = User.objects.get(pk=carol.pk)
    # Refused before any draw: a rationale job writes under its items, and the shared study's test
    # items are hers to read, not to build on (items_to_build_on), so it takes none of them.
    with pytest.raises(GenerationError, match="no items that you may build on in dataset 'bobs-private' split 'test'"):
        generation_job_create(kind="rationales", source=_hosted("carol"), dataset=ds, split="test", user=carol,
                              enqueue=False)
    assert not GenerationJob.objects.filter(created_by=carol, kind="rationales").exists()


def test_a_job_on_unshown_items_stopped_by_a_lowered_share_says_the_dataset_is_no_longer_hers(lowered):
    """Her rationales job on the dev items no study shows: the cancellation names the dataset she
    may no longer build on, not a study those items were never in."""
    alice, ds, lower = lowered
    source = RationaleSource.objects.create(name="alice-t5", kind="lm", backend="seq2seq",
                                            model_name_or_path="/nonexistent/t5")
    job = generation_job_create(kind="rationales", source=source, dataset=ds, split="dev", user=alice, enqueue=False)
    assert job.total == 3
    lower()
    assert not job_goes_on(job.pk)
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert "3 of the job's 3 items" in job.error
    assert f"3 in no study, in dataset {ds.pk} 'bobs-private', no longer a dataset you may build on" in job.error
    assert "no longer in a study you may read" not in job.error
