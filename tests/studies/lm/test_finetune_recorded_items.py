"""A fine-tuning job trains on exactly the items it recorded when it was created
(``params["train_item_ids"]``), not on a sample drawn again from the split as it is now: an item
added to the split since changes nothing (a new draw with the same seed picked other items, and the
job failed saying its items had changed). Recorded items gone since still stop it."""
import pytest
import transformers

from studies.lm.training import TrainResult
from studies.models import GenerationJob, Item
from studies.services.generation import finetune, generation_job_create
from tests.factories import DatasetFactory, ItemFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def trained_on(monkeypatch, settings):
    """The training pairs ``finetune._train`` hands the training loop, which loads no model and
    stops at once (the job cancelled while training: ``_train`` returns None, failing nothing)."""
    settings.RL_LM_DEVICE = "cpu"
    seen = []

    class _Model:
        def to(self, device):
            return self

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(lambda cls, name: object()))
    monkeypatch.setattr(transformers.AutoModelForSeq2SeqLM, "from_pretrained", classmethod(lambda cls, name: _Model()))

    def train(model, tokenizer, pairs, **kwargs):
        seen.extend(pairs)
        return TrainResult(steps=0, final_loss=0.0, cancelled=True)

    monkeypatch.setattr(finetune, "train_seq2seq", train)
    return seen


def _job(ds, **params):
    return generation_job_create(kind="finetune", dataset=ds, split="train", user=None, enqueue=False,
                                 params={"mode": "rationalizer", "base_model": "t5-small", "output_name": "op-ft",
                                         "seed": 0, **params})


def _questions(pairs, ids):
    """Which of the items ``ids`` each pair's input asks, in order."""
    questions = dict(Item.objects.filter(pk__in=ids).values_list("pk", "question"))
    return [[pk for pk in ids if questions[pk] in source] for source, _ in pairs]


@pytest.mark.parametrize("n_shot", [3, None])
def test_a_finetune_job_trains_on_its_recorded_items_after_an_item_is_added_to_the_split(trained_on, n_shot):
    ds = DatasetFactory(name="ds-probe")
    _train_pool(ds)
    job = _job(ds, n_shot=n_shot)
    recorded = job.params["train_item_ids"]
    assert len(recorded) == (n_shot or 6)
    ItemFactory(dataset=ds, split="train", question="Is the added fact true?", gold_answer="yes",
                gold_rationale="The added fact is true.")
    job.refresh_from_db()

    assert finetune._train(job) is None  # the stubbed loop stopped it
    job.refresh_from_db()
    assert job.status != GenerationJob.Status.FAILED, job.error
    # the recorded items, in their recorded order, and no other
    assert _questions(trained_on, recorded) == [[pk] for pk in recorded]
    assert not [source for source, _ in trained_on if "added fact" in source]


def test_a_finetune_job_whose_recorded_item_was_deleted_still_fails(trained_on):
    ds = DatasetFactory(name="ds-probe")
    _train_pool(ds)
    job = _job(ds, n_shot=3)
    Item.objects.filter(pk=job.params["train_item_ids"][0]).delete()
    job.refresh_from_db()

    assert finetune._train(job) is None
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.FAILED
    assert "the items to train on changed since the job was created: 3 items then, 2 now" in job.error
    assert trained_on == []
