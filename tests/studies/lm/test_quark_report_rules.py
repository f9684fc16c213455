"""What decides a Quark run's mean rewards besides the rationales is printed with them: in
``report.json`` the reward an unparsed output gets and how many unscoreable outputs were dropped
(from the constants the reward code uses), and under the admin's before/after table the Gen-U tie
rule, ``only_valid``, the answerers by name and the rules for unparsed and unscoreable outputs."""
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from studies.admin.quark import before_after_table
from studies.lm.genu import TIE_RULE_TEXT
from studies.lm.rewards import RewardSample
from studies.models import GeneralizationQuestion, GenerationJob, RationaleSource
from studies.services.generation import quark_rewards
from studies.services.generation.quark_rewards import build_reward

pytestmark = [pytest.mark.lm, pytest.mark.django_db, pytest.mark.usefixtures("fresh_quark_runs")]
torch = pytest.importorskip("torch")


def test_the_unparsed_output_reward_is_the_one_the_genu_reward_gives(lm_models, strategyqa_dataset, splits):
    answerer = RationaleSource.objects.create(name="tiny-answerer", kind="lm", backend="seq2seq",
                                              model_name_or_path=str(lm_models["t5_answerer"]))
    reward = build_reward({"reward": "genu", "answerer_i": answerer.pk, "answerer_ir": answerer.pk})
    assert reward.score([RewardSample(splits["train"][0].pk, None)]) == [quark_rewards.UNPARSED_OUTPUT_REWARD] == [-1]
    assert quark_rewards.reward_rules("genu")["unparsed_output_reward"] == -1
    assert quark_rewards.reward_rules("marker:is")["unparsed_output_reward"] == 0  # the marker reward's minimum


def test_a_genu_runs_report_and_admin_table_say_what_decides_its_mean_rewards(
        lm_models, strategyqa_dataset, splits, tmp_path, admin_client):
    answerer = RationaleSource.objects.create(name="tiny-answerer", kind="lm", backend="seq2seq",
                                              model_name_or_path=str(lm_models["t5_answerer"]))
    RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq", model_name_or_path=str(lm_models["t5"]))
    for split, n in (("train", 5), ("dev", 3), ("test", 3)):
        for item in splits[split][:n]:
            GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Is it so that {item.question}",
                                                  answer=item.gold_answer,
                                                  validation_status=GeneralizationQuestion.Validation.VALID)
    call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "genu",
                 "--answerer-i", "tiny-answerer", "--answerer-ir", str(answerer.pk), "--steps", "2",
                 "--checkpoint-every", "2", "--max-accuracy-drop", "1", "--batch-size", "4", "--max-new-tokens", "12",
                 "--eval-samples", "2", "--register-without-gain", "--out", str(tmp_path), stdout=StringIO())
    report = json.loads((tmp_path / "report.json").read_text())
    job = GenerationJob.objects.get(pk=report["job_id"])

    assert report["unparsed_output_reward"] == -1
    assert report["unparsed_output_rule"] == "an output that did not parse (no rationale) gets the reward's minimum, -1"
    assert report["unscoreable_output_rule"] == quark_rewards.UNSCOREABLE_RULE
    before, after = job.params["before"], report["after"]
    # Dropped: the outputs that got no reward (an unparsed output got -1, so it counts as rewarded).
    assert report["dropped_unscoreable"]["heldout"] == {
        "before": before["heldout"]["items"] - before["heldout"]["rewarded"],
        "after": after["heldout"]["items"] - after["heldout"]["rewarded"],
        "sampled_before": 3 * before["heldout"]["samples_per_item"] - before["heldout"]["sampled_rewarded"],
        "sampled_after": 3 * after["heldout"]["samples_per_item"] - after["heldout"]["sampled_rewarded"]}
    assert report["dropped_unscoreable"]["validation"] == {
        "before": 3 - before["validation"]["rewarded"], "after": 3 - after["validation"]["rewarded"]}
    assert report["answerers"] == {"F^I": "tiny-answerer", "F^IR": "tiny-answerer"}

    html = admin_client.get(reverse("admin:studies_generationjob_change", args=[job.pk])).content.decode()
    table = html[html.index('class="quark-before-after"'):]
    for said in ("Gen-U answerers: F^I tiny-answerer, F^IR tiny-answerer",
                 "only_valid = True: validated generalization questions only",
                 f"Tie rule: {TIE_RULE_TEXT}",
                 "Unparsed outputs: an output that did not parse (no rationale) gets the reward's minimum, -1.",
                 f"Unscoreable outputs: {quark_rewards.UNSCOREABLE_RULE} (heldout "
                 f"{report['dropped_unscoreable']['heldout']['before']} before, "
                 f"{report['dropped_unscoreable']['heldout']['after']} after; validation "
                 f"{report['dropped_unscoreable']['validation']['before']} before, "
                 f"{report['dropped_unscoreable']['validation']['after']} after)."):
        assert escape(said) in table, said


def test_a_running_genu_jobs_table_states_the_rules_from_its_params(lm_models, db):
    answerer = RationaleSource.objects.create(name="answers-i", kind="lm", backend="seq2seq", model_name_or_path="m")
    other = RationaleSource.objects.create(name="answers-ir", kind="lm", backend="seq2seq", model_name_or_path="m")
    html = str(before_after_table({"reward": "genu", "answerer_i": answerer.pk, "answerer_ir": other.pk,
                                   "only_valid": False, "before": {}}))
    assert escape("F^I answers-i, F^IR answers-ir") in html
    assert "only_valid = False: unvalidated generalization questions count too" in html
    assert escape(TIE_RULE_TEXT) in html and escape("gets the reward's minimum, -1.") in html
    marker = str(before_after_table({"reward": "marker:is", "before": {}}))
    assert "Tie rule" not in marker and escape("gets the reward's minimum, 0.") in marker
