"""Train a rationale source with Quark (SPEC section 9) and register the selected checkpoint.

    manage.py quark_train --policy "t5-large rationalizer" --dataset StrategyQA --reward genu \\
        --answerer-i "F^I" --answerer-ir "F^IR" --steps 1000 --out runs/quark-genu
    manage.py quark_train --policy var/models/my-t5 --dataset StrategyQA --reward marker:because \\
        --steps 60 --train-limit 16 --validation-limit 8 --heldout-limit 8 --out runs/marker
    manage.py quark_train ... --queue      # hand it to an lm worker instead of training here

It runs the same ``quark`` job the lm workers run, in the foreground, and writes DIR/report.json.
"""
import json
from dataclasses import fields
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from lab.folders import output_folder_prepare
from studies.lm.quark import PRESETS, QuarkSettings
from studies.models import Dataset
from studies.services.generation import GenerationError, quark_train
from studies.services.generation.genu import VALIDATED_ONLY_READING
from studies.services.generation.jobs import already_queued_message
from studies.services.generation.quark import DEFAULTS
from studies.services.generation.quark_policy import ACCURACY_NOTE, accuracy_parsed_only, source_by_name_or_id

SETTING_HELP = {
    "preset": "starting values of the settings below, which options given override: default (ours) or reference "
              "(GXimingLu/Quark's code: sample interval 500, warm-up 500, batch 128, top-p 1.0, no gradient clipping, "
              "Adam eps 1e-5); defaults shown are the default preset's",
    "n_reward_tokens": "K, the number of reward tokens (quantiles of the pool); token 0 is the best",
    "kl_coef": "weight of KL(policy || reference) in the token-level loss",
    "entropy_coef": "weight of the entropy bonus subtracted from the loss",
    "lr": "Adam learning rate (after linear warm-up; decays linearly to 0 at the last step)",
    "warmup_steps": "steps of linear learning-rate warm-up",
    "steps": "optimizer steps to run",
    "batch_size": "pool samples per optimizer step",
    "sample_interval": "re-sample the training items with the best token every this many steps",
    "samples_per_item": "rationales sampled per training item in each sampling round",
    "top_p": "nucleus sampling threshold when sampling",
    "temperature": "sampling temperature",
    "max_new_tokens": "longest rationale output (sampling and evaluation)",
    "max_input_length": "prompt tokens kept (longer prompts lose their start)",
    "clip_grad_norm": "clip the gradient norm to this (0: no clipping)",
    "adam_eps": "Adam's epsilon",
    "seed": "seed of every random draw (sampling, batches), per step: a resumed run continues the same",
    "ties": "split (as Quark: equal rewards may straddle a quantile cut, pool order decides) or together "
            "(equal rewards share the quantile of their middle rank; suits a binary reward such as marker:WORD)",
    "eval_samples": "also sample this many rationales per held-out item (top-p, temperature, a fixed seed) before "
                    "and after training and report their mean reward: steadier than the greedy figure on few "
                    "items (0: greedy only)",
}


class Command(BaseCommand):
    help = ("Train a rationale source with Quark on a reward (Gen-U or marker:WORD), select the checkpoint with the "
            "best validation reward that keeps task accuracy, register it as a new source and write DIR/report.json.")

    def add_arguments(self, parser):
        parser.add_argument("--policy", required=True,
                            help="the model to improve: a rationale source (name or id; seq2seq or causal backend) "
                                 "or a checkpoint folder")
        parser.add_argument("--reward", required=True,
                            help="genu (Gen-U by the F^I / F^IR answerers on validated generalization questions) or "
                                 "marker:WORD (1 when the rationale contains WORD; a toy to check training moves)")
        parser.add_argument("--out", required=True, help="folder for report.json (created)")
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument("--train-split", default="train", help="split sampled and trained on (default train)")
        parser.add_argument("--validation-split", default=DEFAULTS["validation_split"],
                            help="split for model selection and task accuracy (default %(default)s)")
        parser.add_argument("--heldout-split", default=DEFAULTS["heldout_split"],
                            help="split for the before/after reward of the report (default %(default)s)")
        for role in ("train", "validation", "heldout"):
            parser.add_argument(f"--{role}-limit", type=int, default=None,
                                help=f"use only the first N {role} items (default: all)")
        parser.add_argument("--answerer-i", default=None, help="genu: the F^I source (name or id)")
        parser.add_argument("--answerer-ir", default=None, help="genu: the F^IR source (name or id)")
        parser.add_argument("--include-unvalidated", action="store_true",
                            help="genu: also answer generalization questions not yet validated (default: "
                                 f"{VALIDATED_ONLY_READING}); items without any are left out and counted")
        parser.add_argument("--checkpoint-every", type=int, default=DEFAULTS["checkpoint_every"],
                            help="save, evaluate on validation and consider for selection every N steps "
                                 "(default %(default)s); a killed worker resumes from the last one")
        parser.add_argument("--max-accuracy-drop", type=float, default=DEFAULTS["max_accuracy_drop"],
                            help="a checkpoint whose validation task accuracy is more than this share below the "
                                 "original model's is not selected (default %(default)s; ours: SPEC says only that "
                                 "the paper kept task accuracy)")
        parser.add_argument("--register-without-gain", action="store_true",
                            help="register the selected checkpoint even when its validation reward is not above the "
                                 "original model's (default: such a run registers nothing and says so)")
        parser.add_argument("--output-name", default=None,
                            help="name of the registered rationale source (default: <policy>-quark-<reward>)")
        defaults = QuarkSettings()
        for f in fields(QuarkSettings):
            if f.name == "steps":
                continue
            parser.add_argument(f"--{f.name.replace('_', '-')}", type={"int": int, "float": float, "str": str}[f.type], default=None,
                                help=f"{SETTING_HELP[f.name]} (default {getattr(defaults, f.name)})",
                                **({"choices": list(PRESETS)} if f.name == "preset" else {}))
        parser.add_argument("--steps", type=int, default=None,
                            help=f"{SETTING_HELP['steps']} (default {defaults.steps})")
        parser.add_argument("--queue", action="store_true",
                            help="queue the job on the lm workers instead of training here (no report.json)")

    def handle(self, *args, **opts):
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            names = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported yet"
            raise CommandError(f"no dataset named {opts['dataset']!r} (datasets: {names})")
        params = {
            "validation_split": opts["validation_split"], "heldout_split": opts["heldout_split"],
            "train_limit": opts["train_limit"], "validation_limit": opts["validation_limit"],
            "heldout_limit": opts["heldout_limit"], "checkpoint_every": opts["checkpoint_every"],
            "max_accuracy_drop": opts["max_accuracy_drop"], "output_name": opts["output_name"],
            "only_valid": not opts["include_unvalidated"], "register_without_gain": opts["register_without_gain"],
        }
        for key in ("answerer_i", "answerer_ir"):
            if opts[key]:
                params[key] = self._source_id(opts[key], key)
        overrides = {f.name: opts[f.name] for f in fields(QuarkSettings) if f.name != "steps"}
        out = Path(opts["out"])
        if not opts["queue"]:  # refused before training, as ``score_study --out`` refuses before scoring
            try:
                output_folder_prepare(out, probe_prefix=".quark_train-", files=["report.json"])
            except OSError as exc:
                raise CommandError(f"--out: cannot write the report to {out}: {exc.strerror or exc}"
                                   f"{f': {exc.filename}' if exc.filename and Path(exc.filename) != out else ''}; "
                                   "nothing trained.") from exc
        try:
            job = quark_train(policy=opts["policy"], dataset=dataset, reward=opts["reward"], steps=opts["steps"],
                              split=opts["train_split"], settings_overrides=overrides, params=params,
                              run_now=not opts["queue"])
        except GenerationError as exc:
            raise CommandError(str(exc)) from exc
        if opts["queue"]:
            self.stdout.write(already_queued_message(job) if job.already_queued
                              else f"queued Quark job {job.pk} ({job.total} steps) on the lm queue")
            return
        if job.status != job.Status.DONE:
            raise CommandError(f"Quark job {job.pk} ended {job.status}: {job.error}")
        report = job.params["report"]
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        held, val = report["heldout"], report["validation"]
        sampled = (f" (sampled, {report['settings']['eval_samples']} per item: {_fmt(held['sampled_reward_before'])} -> "
                   f"{_fmt(held['sampled_reward_after'])})" if report["settings"]["eval_samples"] else "")
        self.stdout.write(
            f"job {job.pk}: {report['steps_run']} steps; held-out mean reward {_fmt(held['reward_before'])} -> "
            f"{_fmt(held['reward_after'])}{sampled}; validation task accuracy {_fmt(val['accuracy_before'])} -> "
            f"{_fmt(val['accuracy_after'])} (unparsed counted wrong; the default), "
            f"{_fmt(accuracy_parsed_only(job.params['before']['validation']))} -> "
            f"{_fmt(accuracy_parsed_only(job.params.get('best')) if report['after'] else None)} (unparsed left out); "
            f"{report['selection']}")
        self.stdout.write(ACCURACY_NOTE)
        for warning in report.get("warnings") or []:
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))
        source = report["registered_source"]
        if source:
            self.stdout.write(self.style.SUCCESS(
                f"step {report['selected_step']} registered as source {source['name']!r} (id {source['id']}); "
                f"report {out / 'report.json'}"))
        else:
            self.stdout.write(self.style.WARNING(f"no source registered; report {out / 'report.json'}"))

    @staticmethod
    def _source_id(value: str, option: str) -> int:
        flag = f"--{option.replace('_', '-')}"
        try:
            source = source_by_name_or_id(value, role=flag)
        except GenerationError as exc:
            raise CommandError(str(exc)) from exc
        if source is None:
            raise CommandError(f"{flag}: no rationale source named {value!r}")
        return source.pk


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
