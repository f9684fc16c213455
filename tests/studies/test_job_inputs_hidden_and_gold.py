"""What an LM job reads, for its researcher and for the model it prompts.

- A job on a dataset and split (no item ids given) takes only the items its researcher may read
  (``items_for_user``): a dataset they see may hold items that only another researcher's study
  shows, and their questions, gold answers and gold rationales would otherwise go into the job's
  prompts (to the researcher's own endpoint). The others are left out, counted in
  ``params["items_left_out"]``; Quark's validation and held-out items too. When the job runs,
  its items are checked again (a study that showed them deleted since cancels it).
- A prompt that asks about an item never carries that item's gold answer or rationale, whatever
  the source's own template names (``{answer}``, ``{rationale}``); demonstrations keep theirs.
- A Quark run never shares items between its training, validation and held-out splits, and its
  report and training record name the training split.
"""
from types import SimpleNamespace

import pytest

import studies.services.generation.quark as quark_service
import studies.services.generation.rationales as rationales_service
from studies.lm import templates
from studies.models import Dataset, GenerationJob, Item, Rationale, RationaleSource
from studies.selectors import items_for_user
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from studies.services.studies import study_create, study_delete
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views

pytestmark = pytest.mark.django_db

YES_NO = [{"label": "yes", "text": "yes"}, {"label": "no", "text": "no"}]
DEMOS = [{"question": "q", "choices": ["yes", "no"], "answer": "yes", "rationale": "DEMO-REASON", "key": f"k{i}"}
         for i in range(6)]


class Echo:
    """Records its prompts; answers with what follows ``GOLD=`` in the prompt (else ``no``)."""

    kind, device = "openai", "remote"

    def __init__(self):
        self.prompts: list[str] = []

    def generate(self, prompts, decoding):
        self.prompts.extend(prompts)
        out = []
        for prompt in prompts:
            gold = (prompt.split("GOLD=")[1].split() or ["no"])[0] if "GOLD=" in prompt else "no"
            out.append([f" {gold}\nReason: copied\n###"])
        return out


@pytest.fixture
def echo(monkeypatch):
    backend = Echo()
    monkeypatch.setattr(rationales_service, "source_backend", lambda *a, **k: backend)
    return backend


def _items(ds, split, n, *, secret="SECRET"):
    return [Item.objects.create(dataset=ds, split=split, external_id=f"{split}{i}", question=f"Q {split} {i}?",
                                choices=YES_NO, gold_answer="yes" if i % 2 else "no",
                                gold_rationale=f"{secret}-{split}-{i}") for i in range(n)]


@pytest.fixture
def shared():
    """One dataset, 10 test and 6 dev items: Alice's studies show all of them; Bob's show 2 of the
    test items (a seeded sample) and all the dev items. Bob's source sends to his own endpoint,
    its template naming the item's answer and rationale."""
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    ds = Dataset.objects.create(name="shared", task_format="yes_no")
    _items(ds, "test", 10, secret="ALICE")
    _items(ds, "dev", 6, secret="ALICE")
    alices = RationaleSource.objects.create(name="a-src", kind="imported")
    bobs = RationaleSource.objects.create(
        name="bob-src", kind="lm", backend="openai", model_name_or_path="m", endpoint_url="https://bob.example/v1",
        template="{question} | {answer} | {rationale}\nAnswer:", demonstrations=DEMOS)
    for split in ("test", "dev"):
        study_create(name=f"alice-{split}", dataset=ds, split=split, sources=[alices], owner=alice, user=None,
                     consent_text="ok")
    bob_test = study_create(name="bob-test", dataset=ds, split="test", sources=[bobs], item_sample_size=2,
                            sample_seed=1, owner=bob, user=None, consent_text="ok")
    study_create(name="bob-dev", dataset=ds, split="dev", sources=[bobs], owner=bob, user=None, consent_text="ok")
    return SimpleNamespace(alice=alice, bob=bob, ds=ds, bobs=bobs, bob_test=bob_test)


def _readable(user, split):
    return set(items_for_user(user=user).filter(split=split).values_list("pk", flat=True))


def test_a_dataset_job_takes_only_the_items_its_researcher_may_read(shared, echo):
    readable = _readable(shared.bob, "test")
    assert len(readable) == 2

    job = generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="test",
                                user=shared.bob, enqueue=False)

    assert set(job.item_ids) == readable and job.total == 2
    assert job.params["items_left_out"]["items"] == 8
    assert "items_for_jobs" in job.params["items_left_out"]["why"]
    while generation_job_run_batch(job_id=job.pk):
        pass
    assert len(echo.prompts) == 2
    hidden = Item.objects.filter(split="test").exclude(pk__in=readable)
    assert not [p for p in echo.prompts for item in hidden if item.question in p]


def test_the_operators_dataset_job_still_takes_every_item(shared):
    job = generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="test",
                                enqueue=False)
    assert job.total == 10 and "items_left_out" not in job.params


def test_a_split_no_study_shows_is_the_job_researchers_to_use(shared, echo):
    """Items no study shows (a split only jobs use, e.g. rationales on a dev split before any human
    study) are taken: only another researcher's study's items are kept from a job."""
    _items(shared.ds, "train", 3, secret="NOBODY")
    job = generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="train",
                                user=shared.bob, enqueue=False)
    assert job.total == 3 and "items_left_out" not in job.params


def test_a_split_with_no_item_the_researcher_may_read_is_refused_saying_why(shared):
    _items(shared.ds, "train", 3, secret="ALICE")
    alices = RationaleSource.objects.get(name="a-src")
    study_create(name="alice-train", dataset=shared.ds, split="train", sources=[alices], owner=shared.alice,
                 user=None, consent_text="ok")  # only Alice's study shows these
    with pytest.raises(GenerationError, match="no items that you may read in dataset 'shared' split 'train'"):
        generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="train",
                              user=shared.bob, enqueue=False)


def test_a_job_whose_items_are_hidden_since_it_was_created_is_cancelled_when_it_runs(shared, echo):
    job = generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="test",
                                user=shared.bob, enqueue=False)
    study_delete(study=shared.bob_test, user=None)  # Bob still sees the dataset, through bob-dev
    assert not _readable(shared.bob, "test")

    assert generation_job_run_batch(job_id=job.pk) is False
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert "2 of the job's 2 items" in job.error and "no longer in a study you may read" in job.error
    assert echo.prompts == []


def test_a_quark_jobs_training_validation_and_held_out_items_are_those_its_researcher_may_read(shared):
    _items(shared.ds, "train", 8, secret="ALICE")  # Alice's study shows all; Bob's a sample of 3
    study_create(name="alice-train", dataset=shared.ds, split="train", sources=[RationaleSource.objects.get(
        name="a-src")], owner=shared.alice, user=None, consent_text="ok")
    policy = RationaleSource.objects.create(name="pol", kind="lm", backend="seq2seq", model_name_or_path="t5-small")
    study_create(name="bob-train", dataset=shared.ds, split="train", sources=[policy], item_sample_size=3,
                 sample_seed=2, owner=shared.bob, user=None, consent_text="ok")

    job = generation_job_create(kind="quark", source=policy, dataset=shared.ds, split="train", user=shared.bob,
                                params={"reward": "marker:because", "settings": {"steps": 2}}, enqueue=False)

    assert set(job.item_ids) == _readable(shared.bob, "train") and len(job.item_ids) == 3
    assert set(job.params["validation_item_ids"]) == _readable(shared.bob, "dev")
    assert set(job.params["heldout_item_ids"]) == _readable(shared.bob, "test")
    left_out = job.params["items_left_out"]
    assert (left_out["train"], left_out["validation"], left_out["heldout"]) == (5, 0, 8)
    assert quark_service.quark_report(job, after=None, source=None)["items_left_out"] == left_out


def _policy():
    return RationaleSource.objects.create(name="pol", kind="lm", backend="seq2seq", model_name_or_path="t5-small")


@pytest.fixture
def three_splits():
    ds = Dataset.objects.create(name="sqa", task_format="yes_no")
    for split in ("train", "dev", "test"):
        _items(ds, split, 4)
    return ds


@pytest.mark.parametrize("split, other", [("test", "held-out items (heldout_split 'test')"),
                                          ("dev", "validation items (validation_split 'dev')")])
def test_quark_refuses_training_on_its_validation_or_held_out_items(three_splits, split, other):
    with pytest.raises(GenerationError) as refused:
        generation_job_create(kind="quark", source=_policy(), dataset=three_splits, split=split,
                              params={"reward": "marker:because", "settings": {"steps": 2}}, enqueue=False)
    assert f"the training items (split {split!r})" in str(refused.value)
    assert other in str(refused.value) and "share 4 items" in str(refused.value)


def test_quark_refuses_a_held_out_split_that_is_its_validation_split(three_splits):
    with pytest.raises(GenerationError, match=r"the validation items \(validation_split 'dev'\) and the held-out "
                                              r"items \(heldout_split 'dev'\) share 4 items"):
        generation_job_create(kind="quark", source=_policy(), dataset=three_splits, split="train",
                              params={"reward": "marker:because", "heldout_split": "dev"}, enqueue=False)


def test_quark_refuses_training_item_ids_from_its_held_out_split(three_splits):
    test_ids = list(Item.objects.filter(split="test").values_list("pk", flat=True)[:2])
    with pytest.raises(GenerationError, match=r"the training items \(the item ids given\) and the held-out"):
        generation_job_create(kind="quark", source=_policy(), dataset=three_splits, item_ids=test_ids,
                              params={"reward": "marker:because"}, enqueue=False)


def test_the_quark_report_and_training_record_name_the_training_split(three_splits, monkeypatch):
    job = generation_job_create(kind="quark", source=_policy(), dataset=three_splits, split="train",
                                params={"reward": "marker:because", "settings": {"steps": 2}}, enqueue=False)
    run_block = quark_service.quark_report(job, after=None, source=None)["run"]
    assert (run_block["train_split"], run_block["validation_split"], run_block["heldout_split"]) == \
        ("train", "dev", "test")

    recorded = {}
    monkeypatch.setattr(quark_service, "job_goes_on", lambda job_id: True)
    monkeypatch.setattr(quark_service, "output_name_check", lambda *a, **k: None)
    monkeypatch.setattr(quark_service, "model_folder_publish", lambda *a, **k: None)
    monkeypatch.setattr(quark_service, "model_source_register", lambda **kw: recorded.update(kw["training"]))
    result = {"validation": {"accuracy": 0.5}, "heldout": {"reward": 0.1}}
    job.params = {**job.params, "before": result, "best": {"step": 2}}
    spec = SimpleNamespace(as_json=lambda: {}, template="", backend="seq2seq", demonstrations=[], seed=0, name="pol")
    settings = SimpleNamespace(as_json=lambda: {}, steps=2, max_new_tokens=8)
    run = SimpleNamespace(spec=spec, settings=settings, prompts=SimpleNamespace(template=lambda token: token))
    quark_service._register(job, run, best_folder=None, after=result)
    assert (recorded["train_split"], recorded["validation_split"], recorded["heldout_split"]) == \
        ("train", "dev", "test")


def test_a_template_never_fills_in_the_gold_of_the_item_it_asks_about(echo):
    ds = Dataset.objects.create(name="sqa", task_format="yes_no")
    items = _items(ds, "test", 6)
    src = RationaleSource.objects.create(
        name="leaky", kind="lm", backend="openai", model_name_or_path="m", endpoint_url="https://api.example.com/v1",
        template="{demonstrations}\nQuestion: {question} GOLD={answer} ({rationale})\nAnswer:", demonstrations=DEMOS)
    job = generation_job_create(kind="rationales", source=src, dataset=ds, split="test", enqueue=False)
    while generation_job_run_batch(job_id=job.pk):
        pass
    assert len(echo.prompts) == 6
    for prompt, item in zip(echo.prompts, items, strict=True):
        assert item.gold_rationale not in prompt and "GOLD= ()" in prompt
        assert "Answer: yes\nReason: DEMO-REASON" in prompt  # the demonstrations keep their answers
    assert not Rationale.objects.filter(source=src, prediction_correct=True).count() == 6


def test_a_t5_template_never_fills_in_the_query_gold():
    item = templates.PromptItem(question="Is it?", choices=(("yes", "yes"), ("no", "no")), dataset="d",
                                answer="yes", rationale="GOLD-REASON")
    prompt = templates.t5_explain_input(item, "explain {question} [{answer}] [{rationale}] <extra_id_0>")
    assert prompt == "explain Is it? [] [] <extra_id_0>"
    # Training targets keep the gold: they are what the model learns to write.
    assert "GOLD-REASON" in templates.t5_explain_target(item)


def test_a_view_share_reads_the_study_not_the_unshown_splits_of_its_dataset(shared, echo):
    """Alice shares a study at view with Carol, who has no study on its dataset: Carol reads the
    study's items, but a job of hers on a split no study shows takes none of it (the share reads
    the study, not the rest of the dataset: the rule of ``datasets_for_design``), and a rationale
    job on the study's own items none either (it would write under them: ``items_to_build_on``)."""
    from studies.services.sharing import study_share

    _items(shared.ds, "train", 6, secret="UNSHOWN")
    carol, _ = researcher_without_reference_views("carol")
    carols = RationaleSource.objects.create(name="carol-src", kind="lm", backend="openai", model_name_or_path="m",
                                            endpoint_url="https://carol.example/v1", demonstrations=DEMOS)
    own = Dataset.objects.create(name="carols", task_format="yes_no")
    _items(own, "test", 2, secret="CAROL")
    study_create(name="carol-own", dataset=own, split="test", sources=[carols], owner=carol, user=None,
                 consent_text="ok")  # her source, through her own study on her own dataset
    alice_test = shared.ds.studies.get(name="alice-test")
    study_share(study=alice_test, user=shared.alice, with_user=carol, level="view")
    assert items_for_user(user=carol).filter(dataset=shared.ds, split="test").count() == 10

    with pytest.raises(GenerationError, match="no items that you may read in dataset 'shared' split 'train'"):
        generation_job_create(kind="rationales", source=carols, dataset=shared.ds, split="train",
                              user=carol, enqueue=False)
    # The shared study's items are hers to read, not to hang rationales from: a rationale job writes
    # under its items, so it takes only those she may build on (items_to_build_on), none here.
    with pytest.raises(GenerationError, match="no items that you may build on in dataset 'shared' split 'test': "
                                              "you may read 10 of its 10 items"):
        generation_job_create(kind="rationales", source=carols, dataset=shared.ds, split="test", user=carol,
                              enqueue=False)
    # Bob, whose own studies use the dataset, keeps the unshown split (the Gen-U-before-humans journey).
    assert generation_job_create(kind="rationales", source=shared.bobs, dataset=shared.ds, split="train",
                                 user=shared.bob, enqueue=False).total == 6
