"""Quark as an LM job on tiny local models: quark_train raises the held-out marker share and
registers a source that generates; a killed or cancelled run resumes from its last checkpoint as the
same run; selection keeps task accuracy; Gen-U rewards leave out items without questions."""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from studies.lm import quark
from studies.lm.genu import TIE_RULE_TEXT
from studies.lm.rewards import RewardSample
from studies.models import GeneralizationQuestion, GenerationJob, Rationale, RationaleSource
from studies.services.generation import (
    GenerationError,
    generation_job_cancel,
    generation_job_create,
    generation_job_resume,
    generation_job_run,
    generation_job_run_batch,
    quark_train,
)
from studies.services.generation import quark as quark_service
from studies.services.generation.quark_rewards import GenUReward, build_reward
from tests.studies.lm.conftest import make_items

pytestmark = [pytest.mark.lm, pytest.mark.django_db, pytest.mark.usefixtures("fresh_quark_runs")]
torch = pytest.importorskip("torch")

# Fast settings for a 2+2 layer T5 with d_model 32: seconds, not minutes.
TINY = {"lr": 3e-3, "warmup_steps": 2, "batch_size": 8, "sample_interval": 10, "samples_per_item": 2,
        "max_new_tokens": 16, "kl_coef": 0.05, "entropy_coef": 0.06}


@pytest.fixture
def t5_source(lm_models):
    return RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq",
                                          model_name_or_path=str(lm_models["t5"]))


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory, strategyqa_train_rows):
    """A tiny Llama as a GGUF file with Q8_0 linear layers (what the real SmolLM2 file is, smaller)."""
    pytest.importorskip("gguf")
    from studies.lm import templates
    from tests import tiny_models as tiny

    texts = [templates.CAUSAL_HEADER] + [templates.causal_training_text(i)
                                         for i in tiny.strategyqa_prompt_items(strategyqa_train_rows)]
    return tiny.build_tiny_gguf(tmp_path_factory.mktemp("gguf"), texts)


def _job(source, dataset, *, steps=6, every=2, reward="marker:is", **params):
    return generation_job_create(kind="quark", source=source, dataset=dataset, split="train", enqueue=False,
                                 params={"reward": reward, "checkpoint_every": every, "max_accuracy_drop": 1.0,
                                         "register_without_gain": True,
                                         "output_name": f"quark-{steps}-{every}-{len(params)}", **params,
                                         "settings": {**TINY, "steps": steps}})


def test_quark_train_reports_before_and_after_and_registers_a_source_that_generates(t5_source, splits, tmp_path):
    out = StringIO()
    call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "marker:is",
                 "--steps", "4", "--checkpoint-every", "2", "--max-accuracy-drop", "1", "--lr", "3e-3",
                 "--warmup-steps", "2", "--sample-interval", "10", "--samples-per-item", "2", "--max-new-tokens", "16",
                 "--register-without-gain", "--out", str(tmp_path / "run"), stdout=out)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps_run"] == 4 and report["reward"] == "marker:is" and report["policy"]["name"] == "tiny-t5"
    assert report["settings"]["lr"] == 3e-3 and report["settings"]["kl_coef"] == 0.05  # given, and the default
    assert report["items"] == {"train": 8, "validation": 6, "heldout": 8}
    for key in ("reward_before", "reward_after"):
        assert 0.0 <= report["heldout"][key] <= 1.0
    assert report["validation"]["accuracy_before"] is not None and report["validation"]["accuracy_after"] is not None
    assert [e["step"] for e in report["evaluations"]] == [0, 2, 4]
    # 4 steps with a sample interval of 10: the policy never samples, and the report says so.
    assert report["warnings"] == ["sample_interval (10) is not below steps (4): the policy never samples its own "
                                  "rationales; it trains only on the reference's first round"]
    assert "warning: sample_interval (10) is not below steps (4)" in out.getvalue()
    assert "held-out mean reward" in out.getvalue() and "registered as source" in out.getvalue()
    # The selected checkpoint is a source that generates with the best token in front.
    source = RationaleSource.objects.get(name=report["registered_source"]["name"])
    assert source.template.startswith(quark.reward_token(0)) and source.training["method"] == "quark"
    assert source.training["selected_step"] == report["selected_step"] in (2, 4)
    job = generation_job_create(kind="rationales", source=source, item_ids=[i.pk for i in splits["test"]],
                                enqueue=False)
    assert generation_job_run(job_id=job.pk).status == "done"
    assert Rationale.objects.filter(source=source).count() + job.failures.count() == len(splits["test"])


@pytest.fixture(scope="session")
def t5_trained_longer(tmp_path_factory, strategyqa_train_rows):
    """The tiny T5 trained 300 steps instead of 50 (about 15 s, once): most of its samples parse as
    an answer and a rationale, so a marker in the rationale is a reward it can earn."""
    from tests import tiny_models as tiny

    torch.set_num_threads(2)  # as the other tiny models: the same sums in the same order on any machine
    return tiny.build_tiny_t5(tmp_path_factory.mktemp("t5-longer") / "model",
                              tiny.strategyqa_prompt_items(strategyqa_train_rows), steps=300)


def test_the_marker_reward_raises_the_heldout_marker_share(t5_trained_longer, strategyqa_dataset, admin_client,
                                                           strategyqa_train_rows, strategyqa_dev_rows, tmp_path):
    """Training moves the policy: the share of held-out rationales with the marker rises, sampled
    (8 per item, the same draws before and after) and greedy. A binary reward rarer than 1/K of the
    pool needs ties=together: with "split" the best token also marks the oldest unrewarded samples
    and the policy learns their age, not the marker. 32 training items, not 8: on 8 the tiny model
    learns the items rather than the token, and whether the held-out share rose then depended on the
    machine's float sums (seeds 0-3 on 8 items: 1 rose on one machine, 6 of 7 on another; on 32 items 7 of 7)."""
    make_items(strategyqa_dataset, strategyqa_train_rows[:32], "train")
    make_items(strategyqa_dataset, strategyqa_dev_rows[:6], "dev")
    make_items(strategyqa_dataset, strategyqa_dev_rows[6:22], "test")
    RationaleSource.objects.create(name="tiny-t5-longer", kind="lm", backend="seq2seq",
                                   model_name_or_path=str(t5_trained_longer))
    out = StringIO()
    call_command("quark_train", "--policy", "tiny-t5-longer", "--dataset", "strategyqa", "--reward", "marker:the",
                 "--steps", "400", "--checkpoint-every", "400", "--max-accuracy-drop", "1", "--lr", "1e-2",
                 "--warmup-steps", "5", "--batch-size", "16", "--sample-interval", "20", "--samples-per-item", "4",
                 "--max-new-tokens", "12", "--kl-coef", "0", "--entropy-coef", "0", "--ties", "together",
                 "--n-reward-tokens", "2", "--eval-samples", "8", "--out", str(tmp_path / "run"), stdout=out)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    held = report["heldout"]
    assert held["before"]["samples_per_item"] == held["after"]["samples_per_item"] == 8
    assert held["before"]["sampled_rewarded"] == held["after"]["sampled_rewarded"] == 16 * 8
    assert held["sampled_reward_after"] >= held["sampled_reward_before"] + 0.1, held
    assert held["reward_after"] >= held["reward_before"], held
    assert report["settings"]["eval_samples"] == 8 and report["registered_source"] is not None
    assert f"(sampled, 8 per item: {held['sampled_reward_before']:.3f} -> {held['sampled_reward_after']:.3f})" in \
        out.getvalue()
    page = admin_client.get(reverse("admin:studies_generationjob_change", args=[report["job_id"]]))
    assert "held-out mean reward, 8 samples per item" in page.content.decode()


def test_a_killed_or_cancelled_run_resumes_from_its_last_checkpoint_as_the_same_run(t5_source, strategyqa_dataset,
                                                                                     splits, admin_client, admin_user):
    straight = generation_job_run(job_id=_job(t5_source, strategyqa_dataset).pk)
    assert straight.status == "done" and straight.done == 6

    job = _job(t5_source, strategyqa_dataset, output_name="quark-interrupted")
    assert generation_job_run_batch(job_id=job.pk) is True  # steps 1-2, checkpoint at 2
    job.refresh_from_db()
    assert (job.done, job.params["checkpoint_step"]) == (2, 2)
    # The worker trains on, then dies before its next checkpoint: that work is lost with it.
    quark_service._RUNS[job.pk].trainer.advance()
    quark_service.forget_runs()
    assert generation_job_run_batch(job_id=job.pk) is True  # from the checkpoint at 2: steps 3-4
    job.refresh_from_db()
    assert job.params["checkpoint_step"] == 4
    generation_job_cancel(job=job, user=admin_user)
    assert generation_job_run_batch(job_id=job.pk) is False
    quark_service.forget_runs()
    generation_job_resume(job=job, user=admin_user, enqueue=False)
    resumed = generation_job_run(job_id=job.pk)
    assert resumed.status == "done" and resumed.done == 6

    # The same run: the same losses step by step, the same pool, the same selection.
    def losses(j):
        return [(h["step"], h["loss"], h["kl"]) for h in j.params["history"]]

    assert losses(resumed) == losses(straight) and len(losses(straight)) == 6
    pools = [json.loads((quark_service.run_folder(j.pk) / "last" / quark.STATE_FILE).read_text())["pool"]
             for j in (straight, resumed)]
    assert pools[0] == pools[1] and len(pools[0]) == 8 * 2 * 1  # 8 items x 2 samples, sampled at step 0 only
    assert [e["reward"] for e in resumed.params["evaluations"]] == [e["reward"] for e in straight.params["evaluations"]]
    assert resumed.params["report"]["selected_step"] == straight.params["report"]["selected_step"]

    # The admin's training report: figures over steps and the before/after table.
    page = admin_client.get(reverse("admin:studies_generationjob_change", args=[resumed.pk]))
    html = page.content.decode()
    assert page.status_code == 200 and html.count("quark-figure") == 2 and "<svg" in html
    assert "held-out mean reward" in html and "validation task accuracy" in html and "before (original)" in html
    assert resumed.params["report"]["registered_source"]["name"] in html


def test_a_run_that_does_not_beat_the_original_registers_nothing_and_says_so(t5_source, strategyqa_dataset, splits,
                                                                            tmp_path):
    """A marker no rationale contains: every reward is 0, before and after, so the selected
    checkpoint does not beat the original on validation reward and nothing is registered; the
    report still has its held-out figures. --register-without-gain registers it, saying so."""
    def train(*extra):
        out = StringIO()
        call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "marker:zebraquartz",
                     "--steps", "2", "--checkpoint-every", "2", "--max-accuracy-drop", "1", "--max-new-tokens", "8",
                     "--output-name", "no-gain", "--out", str(tmp_path), *extra, stdout=out)
        return json.loads((tmp_path / "report.json").read_text()), out.getvalue()

    report, printed = train()
    assert report["validation"]["reward_before"] == 0.0 and report["evaluations"][-1]["reward"] == 0.0
    assert report["selected_step"] == 2 and report["registered_source"] is None
    assert "not above the original's validation reward 0: nothing registered" in report["selection"]
    assert report["heldout"]["reward_after"] == 0.0 and report["run"]["register_without_gain"] is False
    assert "no source registered" in printed and not RationaleSource.objects.filter(name="no-gain").exists()
    quark_service.forget_runs()
    report, printed = train("--register-without-gain")
    assert report["registered_source"]["name"] == "no-gain" and "registered anyway" in report["selection"]


def test_a_gguf_policy_trains_dequantized_and_its_checkpoints_save_and_resume(tiny_gguf, strategyqa_dataset, splits):
    """The README's real model is a GGUF file: it trains as an ordinary float32 model, every
    checkpoint saves as an ordinary folder (transformers refuses to save a model that still has
    its GGUF quantizer), and a run killed after a checkpoint resumes from it as the same run."""
    def job(note):
        return generation_job_create(kind="quark", dataset=strategyqa_dataset, split="train", enqueue=False, params={
            "reward": "marker:the", "policy_path": str(tiny_gguf), "checkpoint_every": 2, "max_accuracy_drop": 1.0,
            "register_without_gain": True, "output_name": f"gguf-{note}",
            "settings": {**TINY, "steps": 4, "max_new_tokens": 8}})

    straight = generation_job_run(job_id=job("straight").pk)
    assert straight.status == "done", straight.error
    assert straight.params["policy"]["backend"] == "causal" and straight.params["policy"]["model"] == str(tiny_gguf)
    last = quark_service.run_folder(straight.pk) / "last"
    assert (last / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((last / "config.json").read_text())

    interrupted = job("interrupted")
    assert generation_job_run_batch(job_id=interrupted.pk) is True  # steps 1-2, checkpoint at 2
    quark_service.forget_runs()  # the worker dies: the run continues from the saved checkpoint
    resumed = generation_job_run(job_id=interrupted.pk)
    assert resumed.status == "done", resumed.error
    # The same run: the same steps and losses. Two fresh runs of this Llama on a CPU already differ
    # in the fifth digit of the loss (5.5887 and 5.5889 at step 1, seen), hence the tolerance.
    assert [h["step"] for h in resumed.params["history"]] == [1, 2, 3, 4]
    assert [h["loss"] for h in resumed.params["history"]] == \
        pytest.approx([h["loss"] for h in straight.params["history"]], rel=1e-3)
    source = RationaleSource.objects.get(pk=resumed.params["output_source_id"])
    from studies.lm.backends import load_transformers_model

    assert getattr(load_transformers_model("causal", source.model_name_or_path).model, "hf_quantizer", None) is None


def test_any_failure_in_a_run_marks_the_job_failed_with_its_error(tiny_gguf, strategyqa_dataset, splits, tmp_path):
    """The policy file goes bad after the job was queued: the run fails, and the job says so
    (before, a job run in the foreground stayed 'running' with no error)."""
    import shutil

    policy = tmp_path / "policy.gguf"
    shutil.copy(tiny_gguf, policy)
    job = generation_job_create(kind="quark", dataset=strategyqa_dataset, split="train", enqueue=False, params={
        "reward": "marker:the", "policy_path": str(policy), "settings": {**TINY, "steps": 2}})
    policy.write_bytes(b"not a GGUF file")
    with pytest.raises(Exception, match="policy.gguf"):
        generation_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed" and "policy.gguf" in job.error and job.finished_at is not None


def test_selection_keeps_task_accuracy():
    evaluations = [{"step": 0, "reward": 0.1, "accuracy": 0.6, "model": "original"},
                   {"step": 10, "reward": 0.4, "accuracy": 0.58, "model": "checkpoint"},
                   {"step": 20, "reward": 0.9, "accuracy": 0.40, "model": "checkpoint"},  # best reward, lost accuracy
                   {"step": 30, "reward": 0.5, "accuracy": 0.60, "model": "checkpoint"},
                   {"step": 40, "reward": 0.5, "accuracy": 0.70, "model": "checkpoint"}]  # a tie: the earlier stays
    chosen = quark_service.choose_checkpoint(evaluations, before=0.6, max_drop=0.05)
    assert chosen["step"] == 30
    assert quark_service.choose_checkpoint(evaluations, before=0.6, max_drop=0.2)["step"] == 20
    assert quark_service.choose_checkpoint(evaluations[:3], before=0.9, max_drop=0.05) is None
    assert not quark_service.keeps_accuracy(None, before=0.5, max_drop=1.0)


def test_genu_reward_leaves_out_items_without_validated_questions(lm_models, strategyqa_dataset, splits, tmp_path):
    answerer = RationaleSource.objects.create(name="tiny-answerer", kind="lm", backend="seq2seq",
                                              model_name_or_path=str(lm_models["t5_answerer"]))
    RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq", model_name_or_path=str(lm_models["t5"]))
    valid = GeneralizationQuestion.Validation.VALID
    for split, n in (("train", 5), ("dev", 3), ("test", 3)):
        for item in splits[split][:n]:
            GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Is it so that {item.question}",
                                                  answer=item.gold_answer, validation_status=valid)
    # An unvalidated question does not count by default.
    GeneralizationQuestion.objects.create(item=splits["train"][7], qtype="similar", text="Is a cat a mammal?",
                                          answer="yes")
    reward = build_reward({"reward": "genu", "answerer_i": answerer.pk, "answerer_ir": answerer.pk})
    assert isinstance(reward, GenUReward)
    items = splits["train"]
    values = reward.score([RewardSample(items[0].pk, "It is heavy."), RewardSample(items[0].pk, None),
                           RewardSample(items[7].pk, "It is heavy.")])
    assert values[0] in (-1.0, 0.0, 1.0, None) and values[1] == -1.0 and values[2] is None

    call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "genu",
                 "--answerer-i", "tiny-answerer", "--answerer-ir", str(answerer.pk), "--steps", "2",
                 "--checkpoint-every", "2", "--max-accuracy-drop", "1", "--batch-size", "4", "--max-new-tokens", "12",
                 "--register-without-gain", "--out", str(tmp_path), stdout=StringIO())
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["items"] == {"train": 5, "validation": 3, "heldout": 3}
    assert report["reward_tie_rule"] == TIE_RULE_TEXT  # the rule GenUReward's modes used (genu_score's default)
    assert report["excluded_without_questions"] == {"train": 3, "validation": 3, "heldout": 5}
    assert report["run"]["only_valid"] is True and report["registered_source"] is not None
    assert RationaleSource.objects.get(pk=report["registered_source"]["id"]).training["reward"] == "genu"


def test_bad_requests_are_clear_errors(t5_source, strategyqa_dataset, splits, tmp_path):
    def run(*args):
        call_command("quark_train", "--dataset", "strategyqa", "--out", str(tmp_path), *args)

    with pytest.raises(CommandError, match="unknown reward 'bleu'"):
        run("--policy", "tiny-t5", "--reward", "bleu")
    with pytest.raises(CommandError, match="needs answerer_i"):
        run("--policy", "tiny-t5", "--reward", "genu")
    with pytest.raises(CommandError, match="neither a rationale source, a model folder nor a .gguf file"):
        run("--policy", str(tmp_path / "nothing"), "--reward", "marker:is")
    with pytest.raises(CommandError, match="no dataset named 'nope'"):
        call_command("quark_train", "--dataset", "nope", "--policy", "x", "--reward", "marker:x", "--out", "x")
    with pytest.raises(CommandError, match="steps must be at least 1"):
        run("--policy", "tiny-t5", "--reward", "marker:is", "--steps", "0")
    hostile = [({"settings": [1]}, "settings must be an object"), ({"checkpoint_every": "x"}, "checkpoint_every must be a number"),
               ({"reward": "genu", "answerer_i": "abc"}, "answerer_i must be a number"),
               ({"max_accuracy_drop": 5}, "max_accuracy_drop must be between"), ({"reward": ["x"]}, "reward must be"),
               ({"train_limit": 0}, "train_limit must be at least 1"), ({"settings": {"lr": "fast"}}, "lr must be float"),
               ({"settings": {"lr": "nan"}}, "lr must be a finite number"),
               ({"settings": {"steps": 10**12}}, "steps must be at most"), ({"output_name": "x" * 201}, "output_name must be"),
               ({"policy_path": "a\x00b"}, "policy contains a NUL character")]
    for params, message in hostile:
        with pytest.raises(GenerationError, match=message):
            generation_job_create(kind="quark", source=None if "policy_path" in params else t5_source,
                                  dataset=strategyqa_dataset, enqueue=False, params={"reward": "marker:is", **params})
    with pytest.raises(GenerationError, match="no train item"):
        quark_train(policy="tiny-t5", dataset=strategyqa_dataset, reward="genu", run_now=False,
                                  params={"answerer_i": t5_source.pk, "answerer_ir": t5_source.pk})


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        call_command("quark_train", "--help")
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--policy", "--reward", "--steps", "--out", "--checkpoint-every", "--max-accuracy-drop",
                   "--kl-coef", "--entropy-coef", "--sample-interval", "--n-reward-tokens", "--queue",
                   "--include-unvalidated", "--heldout-limit", "--ties", "--eval-samples"):
        assert option in text
    assert "marker:WORD" in text and "default 0.05" in text


def test_a_causal_policys_demonstrations_are_drawn_when_the_job_is_created(tiny_gguf, strategyqa_dataset, splits):
    """As for a rationale job: drawn while the job's researcher is known (here the operator: every
    train item), so a job whose researcher's account is deleted before it runs still has them."""
    job = generation_job_create(kind="quark", dataset=strategyqa_dataset, split="train", enqueue=False, params={
        "reward": "marker:the", "policy_path": str(tiny_gguf), "checkpoint_every": 2, "max_accuracy_drop": 1.0,
        "output_name": "gguf-drawn", "settings": {**TINY, "steps": 2, "max_new_tokens": 8}})
    stored = GenerationJob.objects.get(pk=job.pk).params
    assert len(stored["policy"]["demonstrations"]) == 6
    assert "(the operator's job: all of them)" in stored["demonstrations_from"]
