"""A causal or OpenAI source without demonstrations of its own reads six drawn from the dataset's
train items with gold rationales. A researcher's job draws them only from the train items that
researcher may read (``items_for_user``): a dataset they can see may hold train items that only
another researcher's study shows, and those items' gold rationales would otherwise be copied into
the job's params (which its researcher reads) and its prompts. The operator's job draws from all of
them, as before. ``params["demonstrations_from"]`` says which."""
import pytest

from studies.models import GenerationJob, Item, Rationale, RationaleSource
from studies.selectors import items_for_user
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views

from .conftest import make_items

pytestmark = [pytest.mark.lm, pytest.mark.django_db]


@pytest.fixture
def lab(lm_models, strategyqa_dataset, strategyqa_train_rows, strategyqa_dev_rows):
    """On one dataset: Alice's study shows all 20 train items, Bob's ``bob_train`` of them (a seeded
    sample) and both show the 4 dev items; a tiny causal source without demonstrations, in their
    studies (created by the operator: how is not what is tested)."""
    pytest.importorskip("torch")
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    make_items(strategyqa_dataset, strategyqa_train_rows[:20], "train")
    make_items(strategyqa_dataset, strategyqa_dev_rows[:4], "dev")
    source = RationaleSource.objects.create(name="tiny-gpt2", kind="lm", backend="causal", seed=5,
                                            model_name_or_path=str(lm_models["gpt2"]),
                                            decoding={"max_new_tokens": 8})

    def studies(bob_train: int) -> None:
        for owner, split, size in ((alice, "train", None), (alice, "dev", None), (bob, "train", bob_train),
                                   (bob, "dev", None)):
            study_create(name=f"{owner.username}-{split}", dataset=strategyqa_dataset, split=split, sources=[source],
                         item_sample_size=size, sample_seed=3, owner=owner, user=None, consent_text="ok")

    return {"alice": alice, "bob": bob, "source": source, "dataset": strategyqa_dataset, "studies": studies}


def _job(lab, user):
    return generation_job_create(kind="rationales", source=lab["source"], dataset=lab["dataset"], split="dev",
                                 limit=2, batch_size=2, user=user, enqueue=False)


def _train_keys(queryset) -> set[str]:
    return set(queryset.filter(dataset__name="strategyqa", split="train").values_list("external_id", flat=True))


def test_a_researchers_job_draws_its_demonstrations_only_from_train_items_they_may_read(lab):
    lab["studies"](bob_train=8)
    bob = lab["bob"]
    bobs = _train_keys(items_for_user(user=bob))
    assert len(bobs) == 8 and len(_train_keys(Item.objects.all())) == 20

    job = _job(lab, bob)
    generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    keys = {d["key"] for d in job.params["demonstrations"]}
    assert len(keys) == 6 and keys <= bobs, keys - bobs
    hidden_gold = set(Item.objects.filter(split="train").exclude(external_id__in=bobs)
                      .values_list("gold_rationale", flat=True))
    assert not hidden_gold & {d["rationale"] for d in job.params["demonstrations"]}
    assert job.params["demonstrations_from"] == (
        "drawn from the train items of strategyqa with gold rationales that bob, who started the job, may read "
        "(items_for_jobs)")
    # What the prompts read: the frozen demonstrations, recorded with each rationale.
    for info in Rationale.objects.filter(source=lab["source"]).values_list("generation_info", flat=True):
        assert set(info["demonstrations"]) == keys


def test_the_draw_is_made_when_the_job_is_created_for_its_researcher(lab):
    """At creation, while the researcher is known: a job whose account is deleted later acts for
    nobody, who may read no item, and still runs on what was drawn for them."""
    lab["studies"](bob_train=8)
    bob = lab["bob"]
    job = _job(lab, bob)
    assert {d["key"] for d in job.params["demonstrations"]} <= _train_keys(items_for_user(user=bob))
    assert "bob, who started the job" in job.params["demonstrations_from"]


def test_the_operators_job_draws_from_every_train_item_and_says_so(lab):
    lab["studies"](bob_train=8)
    job = _job(lab, None)
    generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    assert len(job.params["demonstrations"]) == 6
    assert {d["key"] for d in job.params["demonstrations"]} <= _train_keys(Item.objects.all())
    assert job.params["demonstrations_from"] == (
        "drawn from the train items of strategyqa with gold rationales (the operator's job: all of them)")
    # The same seed, the same pool: a second operator job draws the same six.
    again = _job(lab, None)
    generation_job_run_batch(job_id=again.pk)
    again.refresh_from_db()
    assert again.params["demonstrations"] == job.params["demonstrations"]


def test_a_researcher_who_reads_fewer_than_six_train_items_is_refused_the_job_with_why(lab):
    lab["studies"](bob_train=4)
    with pytest.raises(GenerationError, match="among the items the job's researcher may read") as refused:
        _job(lab, lab["bob"])
    assert "found 4" in str(refused.value)
    assert not GenerationJob.objects.exists()
