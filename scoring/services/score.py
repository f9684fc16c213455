"""Scoring a study: load its rows into frames, run the vectorised core, store the results.

Each step (generalization, utility, properties model, faithfulness) returns its part of the results
(``pipeline.Part``: its keys, its warnings, its per-unit table); ``_compute`` merges them in the order
below, so a key is found in the step that returns it.

``study_score(*, study) -> ScoreRun`` is the one entry point (the management command, the Celery
task and the admin's "Score now" all call it).

``ScoreRun.results`` (``results.json``), schema_version 1. Figures keep the names they are published
under; per-source figures are dicts ``{source name: value, ..., "all": value over all sources}``:

- ``run``: {id, finished_at, app: {name, version, commit}, packages: {name: version}}, the run that
  made these results and the code it ran (``scoring.provenance``, as the bundle's settings.json)
- ``study``: id, name, kind, dataset, is_imported_outcome, annotators_per_unit, stop_when_decided,
  split, item_sample_size, sample_seed (which of the dataset's items the study drew)
- ``bootstrap``: {method, confidence, n_resamples, seed} of every interval below
- ``sources``: {source: {kind, backend, model_name_or_path, training_preset, training_mode,
  training_method, checkpoint_hash (the source's settings and checkpoint when the results were
  computed), generation: [{backend, model, decoding, template, seed, demonstrations_fingerprint,
  demonstrations_hash, template_text_hash, checkpoint_hash, checkpoint_replaced (True: made by
  weights the source no longer loads; None: not known, ``_checkpoint_replaced``), n_rationales}]}},
  the distinct settings
  its rationales of the study's items record in ``generation_info`` (``_sources``; the hashes:
  ``GENERATION_HASH_RULE``), so two few-shot prompts with the same seed, or two custom templates,
  or two checkpoints published under one source name, never read as one
- ``n_units``, ``n_units_scored``; ``ties``: {before, after, units_with_tie} (a tie counts as wrong)
- ``majority_readings``: {default (``plurality``: the label more annotators gave than any other, our
  reading of SPEC section 2), rules: {plurality, strict_majority: what each is}, spec, n_units,
  n_units_three_or_more_choices, n_units_majority_differs: {before, after, units}, coincide, and either
  note (why the readings coincide, or why imported outcomes cannot tell) or n_units_utility_differs and
  by_source: {source|all: {plurality|strict_majority: {n, useful, unsure, not_useful, no_majority_before,
  no_majority_after, theils_u_utility_given_task_accuracy, theils_u_utility_given_gen_u}}}; early_stopping
  when units were stopped under the default} (``pipeline.majority_readings``)
- ``utility_shares`` (SPEC section 2): {source: {n, useful, useful_ci, unsure, unsure_ci, not_useful,
  not_useful_ci, no_majority_before, no_majority_after}} with percentile bootstrap 95% intervals (our
  choice; SPEC asks for none) and the source's ties (``pipeline.tie_counts``: units without a majority
  at that step, counted wrong; SPEC asks how many ties there were)
- ``short_units`` (collected answers): {n_short_by_source: {source|all: units scored short of
  annotators}, full_units_rule, utility_shares_full_units_only (None when no unit is short)}
- ``task_accuracy_n``: {source|all: the scored units task accuracy is over}
- ``task_accuracy``: {source: share of units whose predicted answer was right}, then
  ``n_items_without_rationale``: {source: the study's items with no unit of that source (its output
  did not parse, or none was made), which task accuracy and U(utility | task accuracy) leave out}, then
  ``task_accuracy_readings``: {default (``TASK_ACCURACY_LEFT_OUT``, the reading ``task_accuracy`` is),
  rules: {items_left_out, items_counted_wrong: what each is}, spec (SPEC states no rule:
  ``genu.UNPARSED_SPEC``), by_source: {source|all: {n_correct, n_units, n_items_without_rationale,
  items_left_out: correct / units, items_counted_wrong: correct / (units + items without rationale)}}}
- ``theils_u_utility_given_task_accuracy``, ``theils_u_utility_given_gen_u`` (SPEC section 3);
  with ``both_directions`` also ``theils_u_task_accuracy_given_utility``, ``theils_u_gen_u_given_utility``;
  ``theils_u_degenerate`` (when any): {U key: {source|all: utility_constant|fewer_than_2_units}}, the cells
  whose U is 1 by definition since utility does not vary there (``pipeline.theils_u_degenerate``)
- ``all_sources``: {rule, gold_sources, by_measure: {measure: the sources its ``all`` pools}, and where
  a gold-kind source is pooled, other_readings: {without_gold_sources: the ``all`` figures without it}}
  (``pipeline.all_sources``); a gold-kind source has no similarity (its rationale is the gold one)
- ``correlation_ratio_utility_similarity`` (BERTScore F1 against the gold rationale) and
  ``theils_u_utility_given_similarity_quintile``, with ``similarity_binning``: {rule, bins_asked,
  bins_used, edges, other_readings: {3_bins|10_bins: {bins_asked, bins_used, edges, theils_u}}}
  (SPEC's "binned similarity" leaves the bins open); ``similarity_model`` names the model's folder and
  ``similarity``: {name, path, num_layers, method, paper_used, fingerprint ("sha256:<hex>" of the model
  folder's files, ``similarity.model_fingerprint``), fingerprint_files, fingerprint_of, paper: {model,
  correlation_ratio: {source|all: the published figure: all from SPEC section 3, per source as quoted in
  issue 21}, same_model, same_model_by, model_stated_in, figures_stated_in}} (``paper`` None for a dataset with no such figure;
  None when similarity was off); ``similarity_requested``: {value, from}, whether similarity was asked for
  and who chose it ("caller": ``study_score(similarity=...)``, e.g. score_study --no-similarity; or
  "RL_SCORING_SIMILARITY": the setting, as web and Celery runs read it)
- ``gen_u_shares`` (same shape as ``utility_shares``), ``gen_u``: {n_items_with_gen_u, n_questions,
  consistency, question_filter, n_questions_validated, n_questions_unvalidated, tie_rule,
  unparseable: {source: counts}, answerers: {F^I|F^IR: [{model, fine_tuning_preset, training}]},
  consistency_bundle (what a bundle of the answerers' consistency is: ``genu.CONSISTENCY_BUNDLE``),
  tie_rules: {default, rules, by_source: {source|all: {n_items, n_tied, <rule>|ties_left_out: {n, mean,
  useful, unsure, not_useful}}}, theils_u_utility_given_gen_u: {<rule>|ties_left_out: {source|all: U}}},
  unparsed_rules: {default (``genu.UNPARSED_LEFT_OUT``, the reading of ``gen_u_shares`` and U(utility | Gen-U)), rules:
  {left_out, counted_wrong: what each is}, spec (``genu.UNPARSED_SPEC``), tie_rule, by_source: {source|all:
  {left_out|counted_wrong: {n, mean, useful, unsure, not_useful, n_questions}}}, theils_u_utility_given_gen_u:
  {left_out|counted_wrong: {source|all: U}} (with utility)}, n_questions_conflicting_answers (questions
  their file gave twice with different answers: the first answer is kept), conflicting_answers: {default
  (``genu.CONFLICTING_FIRST_KEPT``), rules: {first_kept, left_out}, spec, n_questions_conflicting_answers,
  and when non-zero tie_rule, by_source: {source|all: {first_kept|left_out: {n, mean, useful, unsure,
  not_useful, n_questions}}}, consistency_left_out, theils_u_utility_given_gen_u}}, unvalidated_questions
  (the same shape: {default (``genu.QUESTIONS_NOT_INVALID``, the published figures), rules: {not_invalid,
  validated_only}, spec, n_questions_unvalidated, and when non-zero tie_rule, by_source: {source|all:
  {not_invalid|validated_only: ...}}, consistency_validated_only, theils_u_utility_given_gen_u})
- ``imported_utility_check``: {compared, mismatches} (imported outcomes only)
- ``agreement``: {before|after: {unit (what a unit is: ``pipeline.AGREEMENT_UNIT``), n_units, n_annotations,
  n_units_alpha (units with 2+ answers, those alpha uses), n_units_single_answer, krippendorff_alpha,
  fleiss_kappa (None when raters differ, then fleiss_kappa_note and fleiss_kappa_full_units: {rule, raters,
  n_units, fleiss_kappa}), and where the study stopped units short of its annotators per unit
  (``_early_stopping``) early_stopping_bias (``pipeline.EARLY_STOPPING_AGREEMENT_BIAS``: the figures read
  high, units stop when their answers agree) and filled_units: {rule, raters, the same figures over the
  units that filled}, with no fleiss_kappa_full_units (its units may be stopped ones, unanimous by the
  stopping rule; fleiss_kappa_note says so)}} (SPEC section 2); ``agreement_by_item``: {before: the same, with
  the item (or generalization question) as the unit, every source's raters together}
- ``generalization`` (generalization studies): accuracy_delta by type, by utility, per source
  (each with its ties and the per-answer reading: ties_before, ties_after, n_answers_before,
  n_answers_after, accuracy_before_per_answer, accuracy_after_per_answer, delta_per_answer),
  ``aggregation`` {rule, other_reading} (``FIGURE_4_AGGREGATION``: majority per unit, a tie wrong),
  and ``consistency`` of the human answers over bundles, each named by its ``bundle``
  (``BUNDLE_*``: questions only, SPEC's item with its questions, item with its counterfactuals;
  RC's subset and sizes: ``pipeline.bundle_consistency``; a bundle is all its questions that count,
  answered or not, and one with an unanswered question is left out: incomplete_rule,
  n_bundles_incomplete, n_questions_unanswered, incomplete_bundles: {default, rules
  (``BUNDLE_INCOMPLETE_RULES``: left_out, counted_not_consistent), spec, and when any is incomplete
  counted_not_consistent: {before, after}}) (Figure 4), over the questions that count
  when scored (Gen-U's rule, ``studies.selectors.QUESTION_RULE``; so are the study's ties, n_units and
  agreement): question_rule, question_filter, n_questions, n_questions_validated,
  n_questions_unvalidated, n_questions_invalid_left_out, n_units_invalid_left_out,
  answers_invalid_left_out, n_questions_conflicting_answers and conflicting_answers (Gen-U's shape, with
  by_source: {source|all: {first_kept|left_out: {n, accuracy_before, accuracy_after, accuracy_delta,
  n_questions}}} and consistency: {bundle, incomplete_rule, first_kept|left_out: {n_bundles_incomplete, before,
  after}}), unvalidated_questions ({default (``genu.QUESTIONS_NOT_INVALID``), rules, spec,
  n_questions_unvalidated, and when non-zero validated_only: {n_questions, n_units_scored, all, by_type,
  by_utility, by_source, consistency}: Figure 4 on validated questions only), majority_readings (the
  utility study's shape, with Figure 4's accuracy in place of the shares); ``original_utility_from``:
  {rule, studies: [{id, name, pairs, score_run, and where some of its unit scores are stale pairs_stale and
  stale_pairs: [[item_id, source_id]], not lent (a lender with none lent has pairs 0)}],
  pairs_in_several_studies, pairs_the_studies_disagree_on,
  other_lenders: [{id, name, score_run, pairs_disagreeing, utility: [[item_id, source_id, utility]]}],
  stale_rule (``STALE_LENT``), pairs_stale, pairs_stale_left_out (of those, the pairs no other study lent:
  'unknown'), not_scored_here},
  and ``by_utility_other_lenders`` ([{id, name, score_run, pairs_disagreeing, by_utility}]: the breakdown
  with each other lender's utility on the pairs it disagrees on; None for a bundle's copy),
  where the utility of the original rationales came from (``borrowed_utility``: the lending studies
  with the score run whose unit scores were read; a study imported from a bundle adds ``read_from``,
  or gives ``{unavailable, read_from}`` when its bundle had no table, and ``by_utility`` is then None)
- ``question_validation`` (question-validation studies, ``_question_validation``): {default, rules
  (``VALIDATION_RULES``: majority_of_verdicts, answer_corrected, majority_per_field), spec,
  worker_verdict_rule (``VALIDATION_WORKER_VERDICT``), n_questions, n_answers, n_valid,
  n_invalid, n_undecided (ties and questions without verdicts), n_ties, n_questions_without_verdicts,
  annotators_per_unit, short_questions: {rule (``VALIDATION_SHORT_RULE``), n_short,
  n_short_with_verdict, question_ids}, readings: {rule: {n_valid, n_invalid, n_undecided}},
  n_questions_readings_differ (answer_corrected), n_questions_differ_by_reading: {rule: n},
  n_questions_with_suggested_corrected_answer, questions: [{question_id, item_id, text, qtype,
  proposed_answer, status_when_scored, n_verdicts_asked, short, n_verdicts, votes: {field: {yes, no}},
  verdicts: {valid, invalid}, majority_of_verdicts, answer_corrected, majority_per_field,
  suggested_corrected_answer}], other_readings:
  {reading: {rule, n_answers, answers_left_out, n_valid, n_invalid, n_undecided,
  n_questions_verdict_differs}}}; ``scoring.services.validation`` applies its verdicts
- ``properties_model`` (when property annotations exist): log-odds with 95% intervals; with
  ``utility_from`` (the same shape) when the study has no utility of its own; ``outcome`` (unsure
  counted as not useful), ``priors`` {fe_p, vcp_p}, ``interactions`` with ``interactions_rule``
  and ``min_rationales`` {n, rule} (our cut-offs, ``PROPERTIES_*``), and ``unsure_dropped``: the other reading of
  "useful vs not" {outcome, n_rationales, fitted, formula, interactions, terms, ...} or why not fitted
- ``faithfulness`` (opt-in): per source (with ``y_hat_from``, the rule that chose y_hat,
  ``y_hat_from_assumed`` and ``spans_not_recorded``, counts of the probabilities used whose rule was
  assumed or which do not record their highlight spans, and
  ``computed_with``: [{task_model, task_backend, method, prompt, checkpoint, imported_from, n_rationales}]), the
  ``caveats`` of the rules used, ``spec_rule``: {y_hat_from, reading, sources_following,
  sources_departing} (SPEC section 6 takes y_hat from the highlight; a source whose rule was assumed is
  in neither), ``y_hat_from_assumed``: {sources, assumption}, ``left_out``: {source: {invalid,
  highlights_changed}} with ``left_out_rule``, ``skipped_sources`` (the study's sources without
  highlights, which have no faithfulness), and the ``split``; plus ``<split>_sufficiency`` and
  ``<split>_comprehensiveness`` over all sources, named after the study's split
  (``test_sufficiency`` only for a test-split study)
- ``counted_answers`` (collected studies): {rule, tasks_approved, tasks_not_reviewed,
  tasks_failing_an_attention_check}, the tasks whose answers the figures count, and those left out:
  tasks_on_hold, answers_on_hold (submitted work sync held, counted once cleared), hold_rule (what
  holds work, with RL_SYNC_UNLISTED_GRACE_MINUTES), tasks_on_hold_by_reason (when any is held),
  tasks_rejected, answers_rejected, tasks_returned_with_completed_answers, answers_returned,
  tasks_expired_with_completed_answers, answers_expired, expiry_rule (what expires a task, with
  RL_ASSIGNMENT_MINUTES and RL_FIRST_ANSWER_MINUTES, or their rule when unset); attention_check_rule (what "failing" means);
  accepted_flag_rule, flags_accepted, units_with_accepted_flags, answers_in_units_with_accepted_flags (units
  whose question or explanation a researcher accepted a flag on: ``annotations.selectors.review.ACCEPTED_FLAG_SCOPE``);
  speeder_rule, speeder_threshold_seconds_per_question, tasks_speeding, answers_speeding, tasks_untimed (tasks
  faster than ``annotations.selectors.cost.MIN_PLAUSIBLE_SECONDS_PER_QUESTION``); blocked_worker_rule,
  tasks_of_blocked_workers, answers_of_blocked_workers (counted tasks whose worker a block covering the
  study refuses: ``annotations.selectors.worker_blocked_in``; a block ends only tasks in progress), and
  blocked_workers_not_carried for a bundle's copy that was not told its workers' blocks
  (``worker_blocks_unknown``); all of these count; and other_readings: {without_tasks_failing_any_check,
  without_tasks_failing_every_check, approved_tasks_only, without_units_with_accepted_flags,
  without_speeding_tasks, without_blocked_workers: {rule, n_answers, answers_left_out,
  identical_to, n_units_scored, ties, utility_shares, task_accuracy, theils_u_..., agreement}}, the
  same composition on the answers each keeps (``pipeline.other_readings``); a generalization study's
  rows have generalization: {all, by_type, by_utility, by_source, consistency} (Figure 4's shape) in
  place of the utility figures (``_generalization_readings``)
- ``withdrawals`` (only when participants withdrew: ``annotations.services.withdrawal``):
  {participants, answers, counted_answers}, the answers erased with them (a warning says so too)
- ``warnings``: list of what was missing (also on ``ScoreRun.warnings``)
"""
from __future__ import annotations

import json
import logging
import traceback
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Q
from django.utils import timezone

from annotations.models import Annotation, Assignment, PlatformSubmission, Unit
from annotations.selectors import (
    COUNTING_ASSIGNMENT_STATUSES,
    HOLDING_FLAGS,
    claims_that_count,
    study_withdrawals_summary,
    worker_blocked_in,
)
from annotations.selectors.cost import MIN_PLAUSIBLE_SECONDS_PER_QUESTION
from annotations.selectors.platforms import assignments_on_hold
from annotations.selectors.review import (
    ACCEPTED_FLAG_SCOPE,
    SECONDS_PER_QUESTION_RULE,
    study_accepted_flags,
    task_seconds_per_question,
    units_with_accepted_flags,
)
from annotations.services.deadlines import assignment_duration, first_answer_window, task_minutes_fixed
from annotations.services.steps import VALIDATION_FIELDS, YES_NO, property_marks
from annotations.services.stopping import study_answers_not_asked
from lab.jsontext import json_fingerprint
from scoring import metrics
from scoring.errors import ScoringError
from scoring.metrics import pipeline
from scoring.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from scoring.metrics.faithfulness import spec_rule as faithfulness_spec_rule
from scoring.metrics.labels import MAJORITY_RULE, MAJORITY_RULES, MAJORITY_SPEC
from scoring.metrics.pipeline import Part
from scoring.models import BundledUtility, ScoreRun, UnitScore
from scoring.provenance import app_version, package_versions
from scoring.run_stages import score_stage
from scoring.selectors import (
    bundle_import_record,
    outcomes_changed_since,
    score_run_latest,
    score_run_read_at,
    unit_counting_changes,
    unit_score_stale,
)
from scoring.services import genu
from scoring.services.genu import (
    BUNDLE_INCOMPLETE_LEFT_OUT,
    BUNDLE_INCOMPLETE_NOT_CONSISTENT,
    BUNDLE_INCOMPLETE_SPEC,
    gen_u_results,
)
from scoring.services.runs import score_run_requester_check, score_run_store_lock
from scoring.similarity import SimilarityUnavailable, bertscore_f1, paper_correlation_ratio, similarity_model
from studies.faithfulness_rules import ASSUMPTION as FAITHFULNESS_ASSUMPTION
from studies.faithfulness_rules import DIFFER as SPANS_DIFFER
from studies.faithfulness_rules import NOT_RECORDED as SPANS_NOT_RECORDED
from studies.faithfulness_rules import PROBABILITIES, faithfulness_problem_text, y_hat_from_assumed
from studies.faithfulness_rules import spans_state as faithfulness_spans_state
from studies.models import GeneralizationQuestion, Rationale, RationaleSource, Study
from studies.selectors import QUESTION_RULE, questions_that_count
from studies.services.generation.genu import VALIDATED_ONLY_READING
from studies.services.generation.inputs import source_checkpoint
from studies.services.model_paths import folder_training_record

logger = logging.getLogger(__name__)
SCHEMA_VERSION = 1


class NothingScored(ScoringError):
    """A collected utility study's run finds no unit to score (no units, or none with a completed
    answer: its last answers were withdrawn, rejected or put on hold), or a generalization study's
    none with a completed answer (``_generalization``): the run fails with the
    message, and the unit scores of the units it no longer scores are removed all the same
    (``study_score``), so no figure of answers that no longer count is left behind."""


# --- loading ---------------------------------------------------------------------------------


def _annotation_frame(study: Study, *, generalization: bool) -> pd.DataFrame:
    """The before/after answers that count (``annotations.selectors.claims_that_count``): a counted
    claim is complete, so each has both answers."""
    rows = Annotation.objects.filter(
        claim__in=claims_that_count(study=study),
        claim__unit__generalization_question__isnull=not generalization,
        step__in=[Annotation.Step.BEFORE, Annotation.Step.AFTER],
    ).values_list("claim_id", "claim__unit_id", "claim__participant_id", "step", "answer")
    return pd.DataFrame.from_records(
        list(rows), columns=["claim_id", "unit_id", "participant_id", "step", "answer"]
    )


def _units_frame(study: Study, *, generalization: bool) -> pd.DataFrame:
    """The study's units in id order: the bootstrap resamples rows by position, so an order the
    database is free to choose (the claim index's random key) would change the intervals from one
    copy of the study to another (a study imported from its bundle keeps its units' order, not
    their random keys)."""
    qs = Unit.objects.filter(study=study, generalization_question__isnull=not generalization).order_by("id")
    fields = ["id", "item_id", "source_id", "source__name", "item__gold_answer"]
    if study.stop_when_decided:
        fields += ["quota", "decided_at"]  # a unit stopped early is complete at its (lowered) quota
    if generalization:
        fields += ["generalization_question_id", "generalization_question__answer", "generalization_question__qtype",
                   "generalization_question__validation_status", "question_counts", "conflicted"]
        # whether the unit's question counts now (``questions_that_count``, Gen-U's rule), and
        # whether its file gave it twice with different answers (``genu.CONFLICTING_RULES``)
        qs = qs.annotate(question_counts=ExpressionWrapper(
            questions_that_count("generalization_question__"), output_field=BooleanField()),
            conflicted=genu.question_conflicted("generalization_question__"))
    df = pd.DataFrame.from_records(list(qs.values_list(*fields)), columns=fields)
    df = df.rename(columns={"id": "unit_id", "source__name": "source", "item__gold_answer": "gold",
                            "quota": "expected_raters"})
    if study.stop_when_decided:
        # A decided unit is complete with the answers that decided it: its quota also holds the
        # claims still held when it was decided, or put on hold since (``stopping.units_decide``),
        # whose answers do not count; it is never short (neither decided nor full). An undecided one
        # needs the study's workers per unit, whatever its quota: a quota left lowered by its question
        # marked invalid, then valid again after the study closed, decided nothing.
        counted = dict(claims_that_count(study=study).values_list("unit_id").annotate(n=Count("id")).order_by())
        decided = df.pop("decided_at").notna()
        answered = df["unit_id"].map(counted).fillna(0).astype(int)
        df["expected_raters"] = np.minimum(df["expected_raters"], answered).where(decided, study.annotators_per_unit)
    if generalization:
        df = df.rename(columns={
            "generalization_question_id": "question_id", "generalization_question__qtype": "qtype",
            "generalization_question__validation_status": "validation",
        })
        df["question_counts"] = df["question_counts"].astype(bool)
        df["conflicted"] = df["conflicted"].fillna(False).astype(bool)
        df["gold"] = df.pop("generalization_question__answer")
    df["source"] = df["source"].fillna("(no source)")
    return df


def _task_correct(study: Study, frame: pd.DataFrame) -> pd.Series:
    rows = Rationale.objects.filter(item_id__in=frame["item_id"].unique().tolist()).values_list(
        "item_id", "source_id", "prediction_correct"
    )
    lookup = pd.DataFrame.from_records(list(rows), columns=["item_id", "source_id", "task_correct"])
    merged = frame[["item_id", "source_id"]].merge(lookup, on=["item_id", "source_id"], how="left")
    return merged["task_correct"].astype(object).where(merged["task_correct"].notna(), None).to_numpy()


# --- parts of the results: each step returns its keys and warnings (``pipeline.Part``) --------------


def _similarity_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """(item, source, rationale text, gold rationale) of the scored units."""
    pairs = Rationale.objects.filter(item_id__in=frame["item_id"].unique().tolist()).values_list(
        "item_id", "source_id", "text", "item__gold_rationale"
    )
    df = pd.DataFrame.from_records(list(pairs), columns=["item_id", "source_id", "text", "gold_rationale"])
    return frame[["item_id", "source_id"]].drop_duplicates().merge(df, on=["item_id", "source_id"], how="inner")


# Who chose whether a run computes similarity (``similarity_requested.from``): the caller
# (``study_score(similarity=...)``, the command's --no-similarity), or, when it did not say, the
# setting (the web page's and Celery's runs).
SIMILARITY_FROM_SETTING = "RL_SCORING_SIMILARITY"
SIMILARITY_FROM_CALLER = "caller"


def _gold_sources(frame: pd.DataFrame) -> dict[int, str]:
    """The gold-kind sources among ``frame``'s units, {id: name}: their rationale is the gold one, so
    they have no similarity (``_similarity``) and ``all_sources`` names them where an ``all`` pools them."""
    return dict(RationaleSource.objects.filter(pk__in=frame["source_id"].unique().tolist(),
                                               kind=RationaleSource.Kind.GOLD).values_list("pk", "name"))


def _similarity(frame: pd.DataFrame, *, enabled: bool, dataset: str = "",
                requested_from: str = SIMILARITY_FROM_CALLER) -> Part:
    """Each unit's BERTScore F1 against the gold rationale, ``similarity`` and ``similarity_model``,
    and ``similarity_requested`` ({value, from}: whether it was asked for, and by the caller or the
    setting ``RL_SCORING_SIMILARITY``), since the setting alone can leave a run without it."""
    none = {"similarity": None, "similarity_model": None,
            "similarity_requested": {"value": enabled, "from": requested_from}}
    if not enabled:
        why = ("the setting RL_SCORING_SIMILARITY is off" if requested_from == SIMILARITY_FROM_SETTING
               else "its caller asked for none, e.g. score_study --no-similarity")
        return Part(none, [f"Similarity (BERTScore) was not requested for this run ({why}); its correlation ratio "
                           "is left out."], frame)
    df = _similarity_pairs(frame)
    # A gold-kind source's rationale is the gold one: compared with itself it measures nothing (1.0),
    # so it has no similarity and the correlation ratio's ``all`` pools the other sources (SPEC section 3).
    gold = set(_gold_sources(frame))
    usable = df[(df["text"].str.strip() != "") & (df["gold_rationale"].fillna("").str.strip() != "")
                & ~df["source_id"].isin(gold)]
    warnings = []
    if gold:
        names = sorted(frame.loc[frame["source_id"].isin(gold), "source"].astype(str).unique())
        warnings.append(f"Gold-kind source(s) {', '.join(names)}: their rationale is the gold one, so they have no "
                        "similarity; the correlation ratio and U(utility | similarity quintile) leave them out.")
    if len(usable) < (n_other := int((~frame["source_id"].isin(gold)).sum())):
        warnings.append(
            f"{n_other - len(usable)} units have no rationale text or no gold rationale; they have no similarity."
        )
    if usable.empty:
        return Part(none, warnings, frame)
    try:
        model = similarity_model()
        f1 = bertscore_f1(usable["text"].tolist(), usable["gold_rationale"].tolist(), model=model)
        results = {"similarity": {**model.as_json(), "paper": paper_correlation_ratio(dataset, model)},
                   "similarity_model": model.path, "similarity_requested": none["similarity_requested"]}
    except SimilarityUnavailable as exc:
        return Part(none, [*warnings, f"Similarity skipped: {exc}"], frame)
    usable = usable.assign(similarity=f1)[["item_id", "source_id", "similarity"]]
    frame = frame.drop(columns=["similarity"], errors="ignore").merge(usable, on=["item_id", "source_id"], how="left")
    return Part(results, warnings, frame)


# What early stopping changes (``_early_stopping``'s ``affects``): a decided unit keeps the answers
# collected when it was decided, so each unit's majority correctness (utility, Figure 4's per-unit
# accuracy, consistency) is what its full answers would have given, but every figure that reads the
# answers themselves rests on fewer of them than the full design would collect. ``ties``: a decided
# unit may be a tie on its answers (counted wrong) where its full answers would be wrong without one.
EARLY_STOPPING_AFFECTS = {
    Study.Kind.UTILITY: ["ties", "agreement", "agreement_by_item", "counted_answers.other_readings"],
    Study.Kind.GENERALIZATION: [
        "ties", "agreement", "agreement_by_item",
        *(f"generalization.*.{key}" for key in ("ties_before", "ties_after", "n_answers_before", "n_answers_after",
                                               "accuracy_before_per_answer", "accuracy_after_per_answer",
                                               "delta_per_answer")),
        "counted_answers.other_readings",
    ],
}
EARLY_STOPPING_UNCHANGED = {
    Study.Kind.UTILITY: "the utility of every unit",
    Study.Kind.GENERALIZATION: ("every unit's accuracy before and after by its majority (Figure 4's accuracy_before, "
                                "accuracy_after and accuracy_delta) and the consistency of the answers"),
}
EARLY_STOPPING_FEWER = {
    Study.Kind.UTILITY: ("agreement (SPEC section 2) is computed on the answers collected, and so are the majority ties "
                         "and the other readings of the counted answers (counted_answers.other_readings), which "
                         "leave answers out of units that already have fewer"),
    Study.Kind.GENERALIZATION: ("agreement (SPEC section 2), the majority ties and Figure 4's per-answer reading "
                                "(n_answers_*, accuracy_*_per_answer, delta_per_answer) are computed on the answers "
                                "collected, so they differ from what the full design would give, and so are the other "
                                "readings of the counted answers (counted_answers.other_readings), which leave answers "
                                "out of units that already have fewer"),
}


# Why agreement reads high where units stopped short (said in ``_early_stopping`` and in each
# agreement row, ``pipeline._agreement_row``), the agreement rows' ``filled_units`` beside it.
EARLY_STOPPING_AGREEMENT_BIAS = ("Agreement (agreement, agreement_by_item; each row gives filled_units beside it): "
                                 f"{pipeline.EARLY_STOPPING_AGREEMENT_BIAS}")


# What a unit decided early keeps (the qualified note of ``_early_stopping``, when some units are
# neither decided nor full): "every unit decided early has ... its N answers would have given".
EARLY_STOPPING_KEPT = {
    Study.Kind.UTILITY: "the utility",
    Study.Kind.GENERALIZATION: ("the accuracy before and after by its majority (Figure 4's accuracy_before, "
                                "accuracy_after and accuracy_delta) and the consistency"),
}
# Why a unit of a study that stops units early can be neither decided nor full.
EARLY_STOPPING_OPEN_WHY = ("a deciding answer stopped counting after the study closed, or the study closed or was "
                           "scored before it filled, or its question was marked invalid and then valid again after "
                           "the study closed")


def _early_stopping(study: Study, short_units: dict | None = None) -> dict:
    """A study that stopped each unit once its result was decided (``Study.stop_when_decided``):
    how many answers each unit got, what was saved, which result keys rest on fewer answers than
    the full design would collect (``affects``, ``EARLY_STOPPING_AFFECTS``) and a note that says so.

    ``short_units``: the run's ``results.json`` ``short_units`` (``pipeline.short_units``), or a
    generalization study's, counted the same way (``_generalization``, ``SHORT_UNITS_KEY``); None
    where the run has none. Its short units are those neither decided nor full (a unit decided
    early is full at its lowered quota): e.g. a unit reopened when its deciding task was rejected
    after the study closed itself. They are counted here from it, and the note then claims the
    full design's result only for the units decided early."""
    counted = claims_that_count(study=study).values_list("unit_id").annotate(n=Count("id")).order_by()
    per_unit = Counter(n for _unit, n in counted)
    units = Unit.objects.filter(study=study)
    per_unit[0] += units.count() - sum(per_unit.values())
    designed = units.count() * study.annotators_per_unit
    not_asked = study_answers_not_asked(study=study)  # the progress page's reading, the one rule
    kind = study.kind if study.kind in EARLY_STOPPING_AFFECTS else Study.Kind.UTILITY
    by_source = dict((short_units or {}).get("n_short_by_source") or {})
    n_open = by_source.pop(pipeline.ALL, None) if short_units else None
    n = study.annotators_per_unit
    stopped = units.filter(quota__lt=n).exists()
    if n_open:
        they = ("1 unit is", "it is", "it has") if n_open == 1 else (f"{n_open} units are", "they are", "they have")
        claim = (f"A unit stopped collecting once no remaining answer could change whether its majority was right, "
                 f"before and after (a tie counts as wrong), so every unit decided early has {EARLY_STOPPING_KEPT[kind]} "
                 f"its {n} answers would have given; {they[0]} neither decided nor full ({EARLY_STOPPING_OPEN_WHY}): "
                 f"{they[1]} scored on the answers {they[2]}")
    else:
        claim = ("Each unit stopped collecting once no remaining answer could change whether its majority was right, "
                 f"before and after (a tie counts as wrong), so {EARLY_STOPPING_UNCHANGED[kind]} is what its "
                 f"{n} answers would have given")
    return {
        "used": True,
        "answers_per_unit": {str(k): per_unit[k] for k in sorted(per_unit) if per_unit[k]},
        "units_decided": not_asked.units_decided,
        # the run's short units (``short_units``; None where it has none): neither decided nor full
        "units_neither_decided_nor_full": n_open,
        "units_neither_decided_nor_full_by_source": by_source if short_units else None,
        "answers_collected": sum(k * c for k, c in per_unit.items()),
        "answers_designed": designed,
        # saved by stopping only; the answers the units of a question marked invalid will not collect apart
        "answers_saved": not_asked.saved_by_stopping,
        "answers_not_asked_invalid_questions": not_asked.invalid_questions,
        "affects": EARLY_STOPPING_AFFECTS[kind],
        # units stopped short of the design (``pipeline._stopped_design``): agreement reads high
        "agreement_bias": EARLY_STOPPING_AGREEMENT_BIAS if stopped else None,
        "note": (f"{claim}; units have different numbers of answers, and {EARLY_STOPPING_FEWER[kind]}. Figures resting "
                 f"on fewer answers: {', '.join(EARLY_STOPPING_AFFECTS[kind])}."
                 + (f" {EARLY_STOPPING_AGREEMENT_BIAS}" if stopped else "")),
    }


def _utility_studies(study: Study):
    """The studies whose scored utility ``study`` may borrow: those its owner owns (an owner-less
    study, made by the operator: the other owner-less ones). Never one only shared with the owner,
    at any level: its owner shares it without the recipient's say, so a share would let another
    researcher put their scores into this study's figures (a study with more counted answers on a
    pair lends it) by sharing a study with its owner. The owner, not whoever presses "Score", and
    whether or not the owner's account is active, so that the results are the study's, whoever
    scores it and whenever."""
    return Study.objects.filter(owner_id=study.owner_id) if study.owner_id else Study.objects.filter(owner__isnull=True)


# The borrowed utility table's columns (``borrowed_utility``): the lending study in ``study_id``.
UTILITY_COLUMNS = ["item_id", "source_id", "utility", "orig_after_correct", "orig_before_correct", "study_id"]


def _utility_table(records) -> pd.DataFrame:
    """The borrowed utility table from its rows (``UTILITY_COLUMNS``), built the one way whether the
    rows come from unit scores or from a bundle, so both give the same frame to the last bit."""
    return pd.DataFrame.from_records(list(records), columns=UTILITY_COLUMNS)


def borrowed_utility(study: Study) -> tuple[pd.DataFrame, dict]:
    """The utility of each (item, source) of ``study``'s items taken from other studies, for the
    generalization study's Figure 4 (``by_utility`` and the consistency of an item with its
    counterfactuals) and the properties model of a study without utility of its own; the bundle
    export writes it too. A study imported from a bundle reads the table the bundle carried
    (``BundledUtility``), never this installation's studies, so it re-scores to the bundle's
    numbers; any other study takes it from the other studies' unit scores (``_utility_lookup``).

    Returns the table (``UTILITY_COLUMNS``) and where it came from: ``{rule, studies: [{id, name,
    pairs, score_run}], pairs_in_several_studies, pairs_the_studies_disagree_on}`` (and the stale
    unit scores it did not lend: ``_utility_lookup``), with
    ``read_from`` (and ``caveat`` when the bundle says its table is not the one its results were
    scored with) for a bundle's copy, or ``{unavailable: why, read_from}`` for a copy whose bundle
    had no table (the table is then empty and the figures that need it are left out)."""
    bundled = BundledUtility.objects.filter(study=study).first()
    if bundled is None:
        return _utility_lookup(study)
    if bundled.rows is None:
        return _utility_table([]), {"unavailable": bundled.reason, "read_from": BUNDLED_FROM}
    caveat = {"caveat": bundled.reason} if bundled.reason else {}
    return _utility_table(bundled.rows), {**bundled.provenance, "read_from": BUNDLED_FROM, **caveat}


def _utility_lookup(study: Study, *, stale_as: set[tuple[int, int, int]] | None = None
                    ) -> tuple[pd.DataFrame, dict]:
    """``borrowed_utility`` from this installation's studies: of the studies ``_utility_studies``
    allows, the unit scores a score run here computed (a bundle copy's, as its bundle stated them
    and never scored here, are not read: nothing checked them against its answers), for each pair
    the one ``UTILITY_FROM`` chooses (the most counted annotations on the
    pair, then the most recently created study: never when a study was scored, so re-scoring an
    unchanged study moves nothing), with its latest finished score run (whose unit scores these
    are). Where it came from: ``UTILITY_FROM`` says the rule; the studies with the pairs each gave;
    the pairs more than one study scored and how many of those the studies disagree on, which the
    results print next to the figures; and ``other_lenders``: each study the rule did not choose
    that gives another utility on some pair, with those pairs and its utility there
    (``[item_id, source_id, utility]``), from which Figure 4 gives its breakdown beside. A unit score
    that is stale (``_stale_lent``: the lender's own export says so) is never lent nor counted by the
    rule: its lender's entry names the pairs (``pairs_stale``, ``stale_pairs``; a lender with none
    left lent is named with ``pairs`` 0), with ``stale_rule``, ``pairs_stale`` and
    ``pairs_stale_left_out`` (those no other study lent: 'unknown'), and the warning asks for the
    lender to be scored again (``_utility_from_warnings``). ``stale_as``: the (lender, item, source)
    unit scores to take as stale in place of today's rule (``borrowed_utility_as_run``)."""
    rows = (UnitScore.objects.filter(utility__isnull=False, score_run__isnull=False, item__in=study.items.all(),
                                     study__in=_utility_studies(study))
            .exclude(study=study)
            .values_list(*UTILITY_COLUMNS[:2], "utility", "after_correct", "before_correct", "study_id",
                         "n_annotators", "score_run_id", "imported"))
    df = pd.DataFrame.from_records(list(rows), columns=[*UTILITY_COLUMNS, "n_annotators", "score_run_id", "imported"])
    stale = _stale_lent(df) if stale_as is None else np.array(
        [(int(pk), int(i), int(s)) in stale_as for pk, i, s in df[["study_id", "item_id", "source_id"]].itertuples(
            index=False, name=None)], dtype=bool)
    stale_pairs: dict[int, list[list[int]]] = {}
    for pk, item, source in df.loc[stale, ["study_id", "item_id", "source_id"]].itertuples(index=False, name=None):
        stale_pairs.setdefault(int(pk), []).append([int(item), int(source)])
    lenders = Study.objects.in_bulk({int(pk) for pk in df["study_id"].unique()})
    df = df.loc[~stale].copy()
    df["n_counted"] = pd.to_numeric(df["n_annotators"], errors="coerce").fillna(0)  # None: not known, counted 0
    df = df.sort_values(["item_id", "source_id", "n_counted", "study_id"], ascending=[True, True, False, False],
                        kind="stable")
    per_pair = df.groupby(["item_id", "source_id"])["utility"]
    several = per_pair.size().gt(1)
    first = ~df.duplicated(["item_id", "source_id"])
    chosen = _utility_table(df.loc[first, UTILITY_COLUMNS].itertuples(index=False, name=None))
    chosen_utility = df.loc[first].set_index(["item_id", "source_id"])["utility"]
    others = df.loc[~first]
    others = others.loc[others["utility"].to_numpy() != chosen_utility.reindex(
        pd.MultiIndex.from_frame(others[["item_id", "source_id"]])).to_numpy()]

    def named(pk, count: str, n: int) -> dict:
        lender = lenders.get(int(pk))
        run = score_run_latest(study=lender) if lender is not None else None
        return {"id": int(pk), "name": lender.name if lender else "", count: n,
                "score_run": run.pk if run is not None else None}

    counts = chosen["study_id"].value_counts()
    studies = [named(pk, "pairs", int(n)) for pk, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    # A lender whose unit scores of some pairs are stale says which, and is named though it lent no pair.
    for pk in sorted(set(stale_pairs) - {entry["id"] for entry in studies}):
        studies.append(named(pk, "pairs", 0))
    for entry in studies:
        if entry["id"] in stale_pairs:
            entry.update(pairs_stale=len(stale_pairs[entry["id"]]), stale_pairs=sorted(stale_pairs[entry["id"]]))
    pairs_stale = {(i, s) for pairs in stale_pairs.values() for i, s in pairs}
    left_out = pairs_stale - {(int(i), int(s)) for i, s in chosen[["item_id", "source_id"]].itertuples(
        index=False, name=None)}
    other_lenders = []
    for pk, g in sorted(others.groupby("study_id"), key=lambda kv: (-len(kv[1]), kv[0])):
        pairs = sorted((int(i), int(s), int(u)) for i, s, u in g[["item_id", "source_id", "utility"]].itertuples(
            index=False, name=None))
        other_lenders.append({**named(pk, "pairs_disagreeing", len(pairs)), "utility": [list(p) for p in pairs]})
    provenance = {
        "rule": UTILITY_FROM,
        "studies": studies,
        "pairs_in_several_studies": int(several.sum()),
        "pairs_the_studies_disagree_on": int(per_pair.nunique().gt(1).sum()),
        "other_lenders": other_lenders,
        # Unit scores of a lender that no longer match its answers (``STALE_LENT``): never lent.
        "stale_rule": STALE_LENT,
        "pairs_stale": len(pairs_stale),
        "pairs_stale_left_out": len(left_out),
        # Studies holding unit scores of these items that no run here computed (a bundle copy, imported
        # outcomes): named, so a pair they would lend is not left 'unknown' without a word.
        "not_scored_here": [{"id": pk, "name": name} for pk, name in (
            UnitScore.objects.filter(score_run__isnull=True, item__in=study.items.all(),
                                     study__in=_utility_studies(study))
            .exclude(study=study).order_by("study_id").values_list("study_id", "study__name").distinct())],
    }
    return chosen, provenance


def _stale_lent(rows: pd.DataFrame) -> np.ndarray:
    """Which of the lenders' unit-score ``rows`` (``_utility_lookup``'s, with ``n_annotators``,
    ``score_run_id`` and ``imported``) are stale, by the one rule the lender's own export and API
    follow (``selectors.unit_score_stale``, against ``selectors.unit_counting_changes`` and the
    run's ``score_run_read_at``): the answers that count on the unit changed since its run scored
    it. One flag per row, in their order; one query per lender and one for the runs."""
    changes = {int(pk): unit_counting_changes(study=Study(pk=int(pk))) for pk in rows["study_id"].unique()}
    runs = ScoreRun.objects.in_bulk({int(pk) for pk in rows["score_run_id"].unique()})
    read_at = {pk: score_run_read_at(run) for pk, run in runs.items()}
    flags = [bool(unit_score_stale(n_annotators=None if pd.isna(n) else int(n), imported=bool(imported),
                                   read_at=read_at.get(int(run)),
                                   change=changes[int(pk)].get((int(item), int(source)))))
             for pk, item, source, n, run, imported in rows[["study_id", "item_id", "source_id", "n_annotators",
                                                             "score_run_id", "imported"]].itertuples(
                 index=False, name=None)]
    return np.array(flags, dtype=bool)


def stale_pairs_of(entry) -> list[tuple[int, int]]:
    """The (item_id, source_id) pairs a lender entry of a borrowed utility's provenance names stale
    (``stale_pairs``), leaving out what is not such a pair: a provenance read from a bundle is what
    the bundle said (the import checks it; a copy imported before it did may hold anything)."""
    pairs = entry.get("stale_pairs") if isinstance(entry, dict) else None
    return [(pair[0], pair[1]) for pair in pairs if isinstance(pair, list | tuple) and len(pair) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)] if isinstance(pairs, list) else []


def _lender_entries_of(provenance: dict) -> list[dict]:
    """The lender entries (``studies``) of a borrowed utility's ``provenance`` that are objects."""
    studies = provenance.get("studies")
    return [entry for entry in studies if isinstance(entry, dict)] if isinstance(studies, list) else []


def borrowed_utility_as_run(study: Study, recorded: dict) -> tuple[pd.DataFrame, dict]:
    """``borrowed_utility`` of a study that is not a bundle's copy, as the run whose provenance is
    ``recorded`` (its results.json ``original_utility_from``) judged the lenders' staleness: the
    unit scores it named stale (each lender's ``stale_pairs``) left out, and no other, whatever their
    answers give now. The same table as that run's when the lenders and their score runs are still
    the ones it read: the bundle export compares the provenance with ``recorded`` to know."""
    stale = {(int(entry["id"]), i, s) for entry in _lender_entries_of(recorded) if isinstance(entry.get("id"), int)
             for i, s in stale_pairs_of(entry)}
    return _utility_lookup(study, stale_as=stale)


# Why a lender's unit scores may not be lent (``_stale_lent``).
STALE_LENT = ("a lender's unit score is not lent when it is stale by the rule of the `stale` column of "
              "GET /api/v1/scores/ (the answers that count on that unit changed since the lender's run scored it: "
              "work rejected, withdrawn, put on hold or cleared, or submitted after the run began reading), so "
              "Figure 4 never rests on a utility its lender's answers no longer give; the pair then takes the "
              "utility of another lender, or has none ('unknown') until the lender is scored again")


# How a generalization study (or the properties model of a study without utility of its own) finds
# the utility of each original rationale: results.json carries it with the studies it named.
UTILITY_FROM = ("each (question, source) takes its utility from the study with the most counted annotations on it "
                "(a collected study's counted answers; a study of imported outcomes the count its file states, "
                "0 where it states none, as the released outcomes do), "
                "then the most recently created of those (the highest id); never which was scored last, so "
                "re-scoring an unchanged study changes nothing (our rule, SPEC names none); among the other studies "
                "this study's owner owns (never one only shared with them), whether or not the owner's account is "
                "active, as scored here (a "
                "study copied from a bundle, or of imported outcomes, lends once it is scored here, never with "
                "scores no run here computed)")
# ... and how a study imported from a bundle finds it.
BUNDLED_FROM = ("the study bundle this study was imported from, as it was where the bundle was made: the studies "
                "and score runs named are that installation's")


def _other_lenders_named(provenance: dict) -> str:
    """The studies the rule did not choose on some pair they give another utility for, by name."""
    named = [f"{o['name']!r} ({o['pairs_disagreeing']} pairs)" for o in provenance.get("other_lenders") or []]
    return ", ".join(named) or "the other studies"


def _utility_from_warnings(provenance: dict, what: str) -> list[str]:
    """Say when the utility ``what`` uses mixes studies, or when they disagree on a pair, or when a
    bundle's table may not be the one its results were scored with."""
    warnings = []
    studies = [entry for entry in _lender_entries_of(provenance) if entry.get("pairs")]
    if len(studies) > 1:
        warnings.append(f"{what} takes the utility of its original rationales from "
                        f"{len(studies)} studies ({UTILITY_FROM}).")
    if provenance.get("pairs_stale"):
        warnings.append(_stale_lent_warning(provenance, what))
    if provenance.get("pairs_the_studies_disagree_on"):
        warnings.append(f"{what}: {provenance['pairs_the_studies_disagree_on']} of the "
                        f"{provenance['pairs_in_several_studies']} (question, source) pairs scored in more than one "
                        "study have different utilities there; each takes the utility of the study with the most "
                        "counted annotations on it, then the most recently created one (our rule, SPEC names none), "
                        f"not that of {_other_lenders_named(provenance)}.")
    if provenance.get("caveat"):
        warnings.append(f"{what} may differ from the bundle's results.json: {provenance['caveat']}")
    return warnings


def _stale_lent_warning(provenance: dict, what: str) -> str:
    """The warning naming the lenders whose stale unit scores ``what`` did not borrow
    (``_utility_lookup``: ``pairs_stale``, each lender's ``pairs_stale``), and what to do."""
    stale = [entry for entry in _lender_entries_of(provenance) if entry.get("pairs_stale")]
    # Named as 'name' (id N): a reader who may not view a lender gets the withheld marker in its place.
    named = ", ".join((f"{e.get('name')!r} (id {e['id']})" if e.get("id") is not None else repr(e.get("name")))
                      + f" ({e['pairs_stale']} pairs)" for e in stale)
    left_out = provenance.get("pairs_stale_left_out") or 0
    return (f"{what} does not borrow the utility of {provenance['pairs_stale']} (question, source) pairs whose "
            f"lender's unit scores are stale (the answers that count there changed since it was scored): {named}; "
            f"{left_out} of them have no utility now and count as 'unknown', the others take another study's "
            "(original_utility_from.stale_rule). Score the lending study again, then this study, to count them.")


# How Figure 4's accuracy is aggregated (SPEC section 4 says only "accuracy(after) - accuracy(before)"):
# the figures use the first; each summary also gives the other reading, with the ties behind the first.
FIGURE_4_AGGREGATION = {
    "rule": "per unit: a unit is answered right when its annotators' majority is the question's answer; a majority "
            "tie counts as wrong (as for utility); accuracy is the share of units answered right",
    "other_reading": "per answer: the share of all counted answers that are right, each annotator's answer "
                     "counted once, so no tie arises (accuracy_before_per_answer, accuracy_after_per_answer, "
                     "delta_per_answer)",
}


def _share(right, n) -> float | None:
    return float(right) / float(n) if n else None


def _delta_summary(g: pd.DataFrame) -> dict:
    """Figure 4's figures over the units ``g``: accuracy before and after and its change by the
    units' majorities (``FIGURE_4_AGGREGATION["rule"]``) with its interval, the majority ties
    counted wrong, and the other reading, per answer."""
    lo, hi = metrics.bootstrap_ci(g["delta"].to_numpy(float))
    n_before, n_after = int(g["before_n"].sum()), int(g["after_n"].sum())
    before = _share(g["before_right"].sum(), n_before)
    after = _share(g["after_right"].sum(), n_after)
    return {
        "n": int(len(g)),
        "accuracy_before": float(g["before_correct"].mean()),
        "accuracy_after": float(g["after_correct"].mean()),
        "accuracy_delta": float(g["delta"].mean()),
        "accuracy_delta_ci": [lo, hi],
        "ties_before": int(g["before_tie"].sum()),
        "ties_after": int(g["after_tie"].sum()),
        "n_answers_before": n_before,
        "n_answers_after": n_after,
        "accuracy_before_per_answer": before,
        "accuracy_after_per_answer": after,
        "delta_per_answer": None if before is None or after is None else after - before,
    }


def _with_original_utility(frame: pd.DataFrame, lookup: pd.DataFrame, provenance: dict) -> Part:
    """The generalization units with the utility of their original rationale and their accuracy
    delta (``lookup`` and ``provenance``: ``borrowed_utility``'s; when it is unavailable, a warning
    says why ``by_utility`` and the consistency of an item with its counterfactuals are left out)."""
    frame = frame.merge(lookup.drop(columns="study_id").rename(columns={"utility": "original_utility"}),
                        on=["item_id", "source_id"], how="left")
    warnings = _utility_from_warnings(provenance, "Figure 4")
    if provenance.get("other_lenders") and not provenance.get("read_from"):
        warnings.append("Figure 4 by the utility of the original rationale with each other study's utility on the "
                        "pairs it gives another one for: generalization.by_utility_other_lenders.")
    unknown = frame["original_utility"].isna()
    # a copy's are its own items' and sources' (the import maps them: ``importing.borrowed_from``)
    stale_pairs = {pair for entry in _lender_entries_of(provenance) for pair in stale_pairs_of(entry)}
    stale = unknown & pd.Series([(int(i), int(s)) in stale_pairs for i, s in zip(
        frame["item_id"], frame["source_id"], strict=True)], index=frame.index, dtype=bool)
    missing = int((unknown & ~stale).sum())
    if stale.any():
        warnings.append(f"{int(stale.sum())} generalization units appear under 'unknown' in the by-utility breakdown "
                        "because the utility of their original rationale is stale where it was scored (above).")
    if provenance.get("unavailable"):
        warnings.append(f"Figure 4 by the utility of the original rationale (by_utility) cannot be reproduced and is "
                        f"left out, as is the consistency of an item with its counterfactuals: "
                        f"{provenance['unavailable']}.")
    elif missing:
        warnings.append(
            f"{missing} generalization units have no utility for their original rationale (no scored utility "
            "study of that item and source that this study's owner owns); they appear under 'unknown' in the "
            "by-utility breakdown." + (" Studies holding scores of this study's items that no run here computed "
                                       "lend once scored here: " + ", ".join(
                                           f"{s['name']!r} (id {s['id']})" for s in provenance["not_scored_here"])
                                       + "." if provenance.get("not_scored_here") else "")
        )
    frame["delta"] = frame["after_correct"].astype(int) - frame["before_correct"].astype(int)
    frame["utility_name"] = frame["original_utility"].map(_utility_name)
    return Part({"original_utility_from": provenance, "by_utility_other_lenders": _by_utility_other_lenders(
        frame, provenance)}, warnings, frame)


def _utility_name(v) -> str:
    return metrics.UTILITY_NAMES.get(int(v)) if pd.notna(v) else "unknown"


def _by_utility_other_lenders(frame: pd.DataFrame, provenance: dict) -> list[dict] | None:
    """Figure 4's by-utility breakdown with each study the rule did not choose
    (``provenance["other_lenders"]``) lending its utility on the pairs it gives another one for,
    the chosen studies' elsewhere: [{id, name, score_run, pairs_disagreeing, by_utility}]. None when
    the utility is unavailable, and for a study imported from a bundle whose lenders disagreed (the
    pairs they name are the bundle's installation's ids, which the copy's table does not keep)."""
    if provenance.get("unavailable") or (provenance.get("read_from") and provenance.get("other_lenders")):
        return None
    out = []
    for lender in provenance.get("other_lenders") or []:
        theirs = {(i, s): u for i, s, u in lender["utility"]}
        utility = [theirs.get((i, s), u) for i, s, u in
                   zip(frame["item_id"], frame["source_id"], frame["original_utility"], strict=True)]
        names = frame.assign(utility_name=[_utility_name(u) for u in utility])
        out.append({**{k: lender[k] for k in ("id", "name", "score_run", "pairs_disagreeing")},
                    "by_utility": {str(k): _delta_summary(g) for k, g in names.groupby("utility_name", sort=True)}})
    return out


# What a bundle of the human answers' consistency is (SPEC section 5: "an item with its
# counterfactual, or an item with all its generalization questions"); each figure names its own.
BUNDLE_QUESTIONS = ("an item's generalization questions answered with one source's rationale; the item itself is "
                    "left out")
BUNDLE_ITEM_WITH_QUESTIONS = (
    "the item with all its generalization questions (SPEC section 5), per source: the item's own outcome (its "
    "majority before and after the rationale, in the study that lent the original rationale's utility) is "
    "included where it is known; where it is not, the bundle is the questions alone")
BUNDLE_ITEM_WITH_COUNTERFACTUALS = ("the item with its counterfactual questions, per source, where the item's own "
                                    "outcome is known (in the study that lent the original rationale's utility)")


# How a bundle with a question that counts but has no completed answers yet (an incomplete bundle)
# counts in consistency: SPEC section 5 calls a bundle consistent when every instance in it is
# answered correctly and leaves unanswered instances open. The published figures leave such a bundle
# out (and count it: ``n_bundles_incomplete``); ``incomplete_bundles`` gives the other reading beside
# them. Either way a bundle is every question of it that counts, never only its answered ones.
# The reading names and SPEC's words are genu's, shared with Gen-U answerers' consistency.
BUNDLE_INCOMPLETE_RULES = {
    BUNDLE_INCOMPLETE_LEFT_OUT: "a bundle with a question that counts but has no completed answers yet (an "
                                "incomplete bundle) is left out of consistency and relative consistency and counted "
                                "(n_bundles_incomplete); the published figures, our reading (SPEC leaves unanswered "
                                "questions open)",
    BUNDLE_INCOMPLETE_NOT_CONSISTENT: "an incomplete bundle counts as not consistent: its unanswered questions count "
                                      "as wrong (in accuracy and relative consistency too), every bundle at its full "
                                      "size",
}


# The original item's outcome in the borrowed utility table (``borrowed_utility``), which the
# consistency of an item with its questions or counterfactuals adds to each bundle.
ORIGINAL_OUTCOMES = ["orig_before_correct", "orig_after_correct"]


def _original_outcomes(lookup: pd.DataFrame) -> pd.DataFrame:
    """The item's own outcome per (item, source) from ``borrowed_utility``'s table (from this
    installation's studies or a bundle's alike): the rows that know both steps, one per pair."""
    known = lookup.loc[lookup[ORIGINAL_OUTCOMES].notna().all(axis=1), ["item_id", "source_id", *ORIGINAL_OUTCOMES]]
    return known.drop_duplicates(["item_id", "source_id"])


def _bundle_members(frame: pd.DataFrame, units: pd.DataFrame, originals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every question unit that counts (``units``: the ``_units_frame`` rows the question rule
    keeps, answered or not) with its ``bundle`` (item and source), its outcome where it was scored
    (``frame``), ``answered``, whether its bundle is ``complete`` (every member answered) and the
    item's own outcome (``orig_<step>_correct``) where ``originals`` (``_original_outcomes``) knows
    it, whether or not any question of the bundle was answered."""
    full = units[["unit_id", "item_id", "source_id", "source", "qtype", "conflicted"]].merge(
        frame[["unit_id", "before_correct", "after_correct"]], on="unit_id", how="left")
    full["answered"] = full["unit_id"].isin(frame["unit_id"])
    for step in ("before", "after"):
        full[f"{step}_correct"] = full[f"{step}_correct"].where(full["answered"], False).astype(bool)
    if originals is not None:
        full = full.merge(originals, on=["item_id", "source_id"], how="left")
    else:
        full = full.assign(**{c: np.nan for c in ORIGINAL_OUTCOMES})
    full["bundle"] = full["item_id"].astype(str) + "|" + full["source"].astype(str)
    return _with_complete(full)


def _with_complete(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (bundle members) with ``complete``: every member of its bundle answered, over these rows."""
    return rows.assign(complete=rows.groupby("bundle")["answered"].transform("all").astype(bool))


def _with_originals(rows: pd.DataFrame, originals: pd.DataFrame) -> dict:
    """Consistency before and after over bundles of the question ``rows`` with the items' own
    outcomes (``originals``, one row per (item, source): ``orig_<step>_correct``)."""
    ids = pd.concat([rows["item_id"].astype(str) + "|" + rows["source"].astype(str),
                     originals["item_id"].astype(str) + "|" + originals["source"].astype(str)], ignore_index=True)
    stacked = {}
    for step in ("before", "after"):
        correct = pd.concat([rows[f"{step}_correct"].astype(bool),
                             originals[f"orig_{step}_correct"].astype(bool)], ignore_index=True)
        stacked[step] = pipeline.bundle_consistency(correct, ids)
    return stacked


def _steps(rows: pd.DataFrame, *, with_items: bool) -> dict:
    """Consistency before and after over the bundles of ``rows`` (``_bundle_members``' rows), with
    the item's own outcome where known when ``with_items``."""
    if with_items:
        known = rows.loc[rows["orig_after_correct"].notna() & rows["orig_before_correct"].notna()]
        return _with_originals(rows, known.drop_duplicates(["item_id", "source"]))
    return {step: pipeline.bundle_consistency(rows[f"{step}_correct"], rows["bundle"]) for step in ("before", "after")}


def _incomplete_readings(members: pd.DataFrame, *, with_items: bool = False) -> dict:
    """A bundle kind's figures under ``BUNDLE_INCOMPLETE_RULES``: the published ones (before,
    after: the complete bundles only), ``n_bundles_incomplete`` and ``n_questions_unanswered``, and
    ``incomplete_bundles``: the rules, what SPEC says and, when some bundle is incomplete, the
    figures with incomplete bundles counted not consistent."""
    incomplete = members.loc[~members["complete"]]
    readings = {"default": BUNDLE_INCOMPLETE_LEFT_OUT, "rules": dict(BUNDLE_INCOMPLETE_RULES),
                "spec": BUNDLE_INCOMPLETE_SPEC}
    if len(incomplete):
        readings[BUNDLE_INCOMPLETE_NOT_CONSISTENT] = _steps(members, with_items=with_items)
    return {"incomplete_rule": BUNDLE_INCOMPLETE_RULES[BUNDLE_INCOMPLETE_LEFT_OUT],
            "n_bundles_incomplete": int(incomplete["bundle"].nunique()),
            "n_questions_unanswered": int((~incomplete["answered"]).sum()),
            **_steps(members.loc[members["complete"]], with_items=with_items),
            "incomplete_bundles": readings}


def _generalization_consistency(frame: pd.DataFrame, units: pd.DataFrame, originals: pd.DataFrame) -> dict:
    """Consistency of the human answers over bundles, each named with its definition (``bundle``):
    an item's questions with one source (``BUNDLE_QUESTIONS``); SPEC's bundle, the item with all
    its questions (``BUNDLE_ITEM_WITH_QUESTIONS``, where the original item's outcome is known for
    at least one bundle); and an item with its counterfactuals (``BUNDLE_ITEM_WITH_COUNTERFACTUALS``).
    A bundle is every question that counts (``units``), answered or not; one with an unanswered
    question is left out and counted, and the other reading given (``_incomplete_readings``). The
    item's own outcome is ``originals``' (``_original_outcomes``), for a bundle none of whose
    questions was answered too."""
    members = _bundle_members(frame, units, originals)
    consistency = {"all_generalization_questions": {"bundle": BUNDLE_QUESTIONS, **_incomplete_readings(members)}}
    known = members.loc[members["orig_after_correct"].notna() & members["orig_before_correct"].notna()]
    n_with_item = int(known["bundle"].nunique())
    if n_with_item:
        consistency["item_with_generalization_questions"] = {
            "bundle": BUNDLE_ITEM_WITH_QUESTIONS,
            "n_bundles_with_item": n_with_item,
            "n_bundles_without_item": int(members["bundle"].nunique() - n_with_item),
            **_incomplete_readings(members, with_items=True),
        }
    cf = members.loc[members["bundle"].isin(known["bundle"]) & (members["qtype"] == "counterfactual")]
    if len(cf):
        cf = _with_complete(cf)
        consistency["item_with_counterfactuals"] = {
            "bundle": BUNDLE_ITEM_WITH_COUNTERFACTUALS, **_incomplete_readings(cf, with_items=True)}
    return consistency


def _incomplete_bundles_warning(consistency: dict) -> list[str]:
    """The warning naming the bundles consistency leaves out as incomplete (none when every bundle
    is complete)."""
    entry = consistency.get("all_generalization_questions") or {}
    n = entry.get("n_bundles_incomplete")
    if not n:
        return []
    return [f"{n} bundles (an item's generalization questions with one source) have {entry['n_questions_unanswered']} "
            "questions with no completed answers yet: they are left out of consistency and relative consistency "
            "(n_bundles_incomplete; SPEC leaves unanswered questions open); consistency's incomplete_bundles gives "
            "the figures with each counted as not consistent."]


def _generalization_questions(units: pd.DataFrame, answers: pd.DataFrame) -> Part:
    """Which of a generalization study's questions Figure 4 counts: those that count now by Gen-U's
    rule (``QUESTION_RULE``: a question marked invalid after the study's units were built is
    left out), the counts of validated and unvalidated ones, and those left out with their answers
    (the counted before and after answers on their units). The frame is the units that count. The
    answers kept are those ``annotations.selectors.claim_scored`` says scoring reads (the export's
    ``counts``); this step keeps the left-out ones in view to count them."""
    kept = units["question_counts"]
    left_out = units.loc[~kept]
    counted = units.loc[kept]
    block, warnings = genu.question_filter(
        counted.drop_duplicates("question_id")["validation"], what="Figure 4",
        unvalidated_why="the study's units pair every question not marked invalid with each source",
        counted=f"the published figures count every question not marked invalid when scored, Gen-U's rule "
                f"({QUESTION_RULE}); {VALIDATED_ONLY_READING} is the other reading, not theirs",
        other_reading="generalization.unvalidated_questions.validated_only gives Figure 4 and its consistency on "
                      "validated questions only")
    n_answers_left_out = int(answers["unit_id"].isin(left_out["unit_id"]).sum()) if len(answers) else 0
    block = {
        "question_rule": QUESTION_RULE, **block,
        "n_questions": int(counted["question_id"].nunique()),
        "n_questions_invalid_left_out": int(left_out["question_id"].nunique()),
        "n_units_invalid_left_out": int(len(left_out)),
        "answers_invalid_left_out": n_answers_left_out,
    }
    if len(left_out):
        warnings.append(
            f"{block['n_questions_invalid_left_out']} generalization questions of this study are now marked invalid: "
            f"their {len(left_out)} units and {n_answers_left_out} counted answers are left out of Figure 4, its "
            "ties, agreement and consistency (Gen-U's rule).")
    counted = counted.assign(unvalidated=counted["validation"] != GeneralizationQuestion.Validation.VALID)
    return Part(block, warnings, counted.drop(columns=["question_counts", "validation"]))


def _figure_4(frame: pd.DataFrame, *, by_utility: bool, pairs: bool = True) -> dict:
    """Figure 4's accuracy over the generalization units ``frame`` (``_delta_summary``): over all
    units, by question type, by the utility of the original rationale (None when ``by_utility`` is
    false: the utility is unavailable), by source and (unless ``pairs`` is false) by source and type."""
    out = {
        "all": _delta_summary(frame),
        "by_type": {str(k): _delta_summary(g) for k, g in frame.groupby("qtype", sort=True)},
        "by_utility": {str(k): _delta_summary(g) for k, g in frame.groupby("utility_name", sort=True)}
        if by_utility else None,
        "by_source": {str(k): _delta_summary(g) for k, g in frame.groupby("source", sort=True)},
    }
    if pairs:
        out["by_source_and_type"] = {
            f"{s}|{t}": _delta_summary(g) for (s, t), g in frame.groupby(["source", "qtype"], sort=True)}
    return out


def _generalization(study: Study, suspects: _Suspects) -> Part:
    """A generalization study: ties, counts, agreement and ``generalization`` (Figure 4), all over
    the questions that count when scored (``_generalization_questions``), the other readings of
    which counted answers they rest on (``_generalization_readings``, under ``READINGS_KEY``) and
    its units scored short of annotators in the utility study's ``short_units`` shape
    (``pipeline.short_units``, under ``SHORT_UNITS_KEY``: ``_early_stopping`` counts them; not
    published, its full-unit utility shares being no figure of a generalization study)."""
    units = _units_frame(study, generalization=True)
    if units.empty:
        raise ScoringError(f"Study {study.name!r} has no generalization units to score.")
    answers = _annotation_frame(study, generalization=True)
    questions = _generalization_questions(units, answers)
    units = questions.frame
    if units.empty:
        raise ScoringError(f"Study {study.name!r}: every one of its generalization questions is now marked invalid; "
                           "there is nothing left to score.")
    answers = answers.loc[answers["unit_id"].isin(units["unit_id"])] if len(answers) else answers
    outcomes = pipeline.collected_outcomes(units, answers, expected_raters=study.annotators_per_unit)
    if outcomes.frame.empty:  # the run fails as a utility study's does (``pipeline.score_frames``' words)
        raise NothingScored(f"Study {study.name!r} has no completed answers yet; nothing to score.")
    outcomes.frame = pipeline.answers_right(outcomes.frame, answers)  # for the per-answer reading
    results = {  # in the order results.json has always had
        "ties": outcomes.results["ties"], "n_units": outcomes.results["n_units"],
        "n_units_scored": int(len(outcomes.frame)), "agreement": outcomes.results["agreement"],
        "agreement_by_item": outcomes.results["agreement_by_item"],
    }
    lookup, provenance = borrowed_utility(study)
    with_utility = _with_original_utility(outcomes.frame, lookup, provenance)
    originals = _original_outcomes(lookup)
    frame = with_utility.frame
    by_utility = not with_utility.results["original_utility_from"].get("unavailable")
    results["generalization"] = {
        **_figure_4(frame, by_utility=by_utility),
        "aggregation": FIGURE_4_AGGREGATION,
        "consistency": _generalization_consistency(frame, units, originals),
        "original_utility_from": with_utility.results["original_utility_from"],
        "by_utility_other_lenders": with_utility.results["by_utility_other_lenders"],
        **questions.results,
        "n_questions_conflicting_answers": int(frame.loc[frame["conflicted"], "question_id"].nunique()),
        "conflicting_answers": _conflicting_answers(frame, units),
        "unvalidated_questions": _unvalidated_questions(frame, units, originals, by_utility=by_utility),
        "majority_readings": _majority_readings(study, outcomes.frame, answers, _accuracy_figures),
    }
    warnings = questions.warnings + outcomes.warnings + with_utility.warnings
    warnings += _incomplete_bundles_warning(results["generalization"]["consistency"])
    results[SHORT_UNITS_KEY] = pipeline.short_units(outcomes.frame)
    if n_conflicting := results["generalization"]["n_questions_conflicting_answers"]:
        warnings.append(f"Figure 4 counts {n_conflicting} generalization questions their file gave twice with different "
                        "answers, with the first answer (our choice, SPEC is silent); "
                        "generalization.conflicting_answers gives the figures with them left out.")
    results[READINGS_KEY] = _generalization_readings(study, units, answers, frame, results, suspects,
                                                     by_utility=by_utility, originals=originals)
    return Part(results, warnings)


# What each other reading of a generalization study's counted answers reports (the utility
# study's ``pipeline.READING_KEYS``, with Figure 4 in place of utility): the counts, the ties and
# agreement, and ``generalization``'s headline figures (``GENERALIZATION_READING_FIGURES``).
GENERALIZATION_READING_KEYS = ("n_units_scored", "ties", "generalization", "agreement")
GENERALIZATION_READING_FIGURES = ("all", "by_type", "by_utility", "by_source", "consistency")
# The columns of a generalization unit that do not depend on its answers (the original rationale's
# utility and outcome, ``_with_original_utility``): a reading takes them from the published frame.
_ORIGINAL_COLUMNS = ("original_utility", "orig_before_correct", "orig_after_correct", "utility_name")


def _generalization_reading_figures(results: dict) -> dict:
    """The figures a generalization reading repeats or recomputes (``GENERALIZATION_READING_KEYS``)."""
    out = {k: results[k] for k in GENERALIZATION_READING_KEYS if k in results}
    if "generalization" in out:
        out["generalization"] = {k: out["generalization"][k] for k in GENERALIZATION_READING_FIGURES
                                 if k in out["generalization"]}
    return out


def _generalization_reading(study: Study, units: pd.DataFrame, answers: pd.DataFrame, published: pd.DataFrame, *,
                            by_utility: bool, originals: pd.DataFrame) -> dict:
    """Figure 4, its consistency, ties and agreement on the counted ``answers`` one reading keeps,
    composed as the published ones are (``_generalization``); the original rationales' utility is
    the published frame's and the items' own outcomes ``originals`` (neither depends on this
    study's answers)."""
    outcomes = pipeline.collected_outcomes(units, answers, expected_raters=study.annotators_per_unit, by_item=False)
    if outcomes.frame.empty:
        return {"identical_to": None, "note": f"Study {study.name!r} has no completed answers under this reading; "
                                              "nothing to score."}
    frame = pipeline.answers_right(outcomes.frame, answers)
    original = published[["unit_id", *(c for c in _ORIGINAL_COLUMNS if c in published)]]
    frame = frame.merge(original, on="unit_id", how="left")
    frame["delta"] = frame["after_correct"].astype(int) - frame["before_correct"].astype(int)
    results = {"n_units_scored": int(len(frame)), "ties": outcomes.results["ties"],
               "generalization": {**_figure_4(frame, by_utility=by_utility, pairs=False),
                                  "consistency": _generalization_consistency(frame, units, originals)},
               "agreement": outcomes.results["agreement"]}
    return {"identical_to": None, **_generalization_reading_figures(results)}


def _generalization_readings(study: Study, units: pd.DataFrame, answers: pd.DataFrame, published: pd.DataFrame,
                             results: dict, suspects: _Suspects, *, by_utility: bool,
                             originals: pd.DataFrame) -> dict:
    """``counted_answers.other_readings`` of a generalization study: for each reading of
    ``_reading_masks``, its rule, the answers it keeps and leaves out, and the published
    composition on the answers it keeps (``_generalization_reading``), in the shape of a utility
    study's (``pipeline.other_readings``): a reading that keeps every answer says ``identical_to``
    "published" and repeats the published figures; one that keeps the same answers as an earlier
    one names it and repeats its figures."""
    masks, rules = _reading_masks(study, answers, suspects)
    out: dict = {}
    done: list[tuple[str, np.ndarray]] = []
    for name, mask in masks.items():
        mask = np.asarray(mask, dtype=bool)
        row: dict = {"rule": rules[name], "n_answers": int(mask.sum()), "answers_left_out": int((~mask).sum())}
        same = next((earlier for earlier, m in done if np.array_equal(m, mask)), None)
        if mask.all():
            row.update(identical_to="published", **_generalization_reading_figures(results))
        elif same is not None:
            row.update({k: v for k, v in out[same].items() if k in GENERALIZATION_READING_KEYS}, identical_to=same)
        elif not mask.any():
            row.update(identical_to=None, note="No answers are left under this reading; nothing to score.")
        else:
            row.update(_generalization_reading(study, units, answers.loc[mask], published, by_utility=by_utility,
                                               originals=originals))
        out[name] = row
        done.append((name, mask))
    return out


# --- question-validation studies: the crowd's verdicts on generalization questions -----------------

# How the workers' verdicts on a question (each the stored answer of ``steps.clean_answer``: "valid"
# when well_formed, type_correct and answer_correct are all "yes", else "invalid") decide it. SPEC
# section 4 says only that humans validate questions and answers: it defines no aggregation, so each
# reading is ours ("a default is a claim") and the results give them all.
VALIDATION_MAJORITY = "majority_of_verdicts"
VALIDATION_ANSWER_CORRECTED = "answer_corrected"
VALIDATION_FIELD_MAJORITY = "majority_per_field"
# What makes one worker's verdict "valid" (``annotations.services.steps.clean_answer``), named in the
# default rule and the results (``worker_verdict_rule``): the per-field reading below is the other one.
VALIDATION_WORKER_VERDICT = ("a worker's verdict is valid only when they answer yes to all three of well_formed, "
                             "type_correct and answer_correct, else invalid")
VALIDATION_RULES = {
    VALIDATION_MAJORITY: ("majority of worker verdicts (" + VALIDATION_WORKER_VERDICT + "); a tie decides nothing "
                          "(the question stays unvalidated)"),
    VALIDATION_ANSWER_CORRECTED: (
        "answer corrected: a question whose well_formed and type_correct have a yes majority and answer_correct a "
        "no majority, with a strict majority of those no voters naming one corrected answer other than the "
        "proposed one (a correction naming the proposed answer, which the page offered before it was refused, "
        "counts as none), would be valid with that answer; every other question as the majority of worker "
        "verdicts"),
    VALIDATION_FIELD_MAJORITY: (
        "majority per field: each of well_formed, type_correct and answer_correct decided by the majority of the "
        "workers' answers to it; valid when all three have a yes majority, invalid when any has a no majority, "
        "otherwise (a tie on a field, none with a no majority) undecided"),
}
# Which questions were judged by fewer workers than the study asks (``short_questions``): the verdicts
# of a short question are the majority of the few verdicts counted; ``question_validation_apply``
# applies only the questions with all their judges unless told to apply short ones too.
VALIDATION_SHORT_RULE = ("a question is short when fewer verdicts count for it than the study asks for (its "
                         "annotators_per_unit per unit of the question); its verdict is the majority of those counted, "
                         "and applying the verdicts leaves it unchanged unless short questions are applied explicitly")
VALIDATION_SPEC = ("SPEC section 4 says humans validate questions and answers; it defines no aggregation of their "
                   "verdicts")
UNDECIDED = "undecided"


def _validation_answers(study: Study) -> pd.DataFrame:
    """The validation answers that count (``claims_that_count``: withdrawn answers are erased,
    rejected, returned, expired and held work left out), one row per answer."""
    rows = Annotation.objects.filter(
        claim__in=claims_that_count(study=study), claim__unit__generalization_question__isnull=False,
        step=Annotation.Step.VALIDATION,
    ).values_list("claim_id", "claim__unit_id", "claim__unit__generalization_question_id", "answer", "payload")
    return pd.DataFrame.from_records(list(rows), columns=["claim_id", "unit_id", "question_id", "answer", "payload"])


def _question_verdicts(answers: pd.DataFrame, proposed: dict[int, str]) -> dict[int, dict]:
    """Per question (by id): the number of verdicts, the votes for each field, and its outcome under
    each reading of ``VALIDATION_RULES`` (``valid``, ``invalid`` or ``UNDECIDED``), with the corrected
    answer a strict majority of those who said the answer is wrong named (``suggested_corrected_answer``,
    "" when none). A correction naming the question's ``proposed`` answer is no correction: the worker
    path refuses it now (``steps.clean_answer``), but answers stored before it did, and bundles of them,
    hold some."""
    out: dict[int, dict] = {}
    for question_id, group in answers.groupby("question_id", sort=True):
        own = proposed.get(int(question_id))
        verdicts = Counter(group["answer"])
        payloads = [p if isinstance(p, dict) else {} for p in group["payload"]]
        votes = {name: {v: sum(1 for p in payloads if p.get(name) == v) for v in YES_NO}
                 for name, _ in VALIDATION_FIELDS}
        n_valid, n_invalid = verdicts.get("valid", 0), verdicts.get("invalid", 0)
        majority = "valid" if n_valid > n_invalid else "invalid" if n_invalid > n_valid else UNDECIDED
        corrections = Counter(p.get("corrected_answer") for p in payloads
                              if p.get("answer_correct") == "no" and p.get("corrected_answer")
                              and p.get("corrected_answer") != own)
        named, n_named = corrections.most_common(1)[0] if corrections else ("", 0)
        suggested = named if votes["answer_correct"]["no"] > votes["answer_correct"]["yes"] \
            and 2 * n_named > votes["answer_correct"]["no"] else ""
        corrected = bool(suggested) and all(votes[name]["yes"] > votes[name]["no"]
                                            for name in ("well_formed", "type_correct"))
        out[int(question_id)] = {
            "n_verdicts": int(len(group)), "votes": votes, "verdicts": {"valid": n_valid, "invalid": n_invalid},
            VALIDATION_MAJORITY: majority, VALIDATION_ANSWER_CORRECTED: "valid" if corrected else majority,
            VALIDATION_FIELD_MAJORITY: _field_majority(votes),
            "suggested_corrected_answer": suggested,
        }
    return out


def _field_majority(votes: dict) -> str:
    """A question's verdict by ``VALIDATION_FIELD_MAJORITY``: each field by its own majority of the
    workers' yes and no; invalid when any field has a no majority, valid when all have a yes majority,
    else (a tie on a field) ``UNDECIDED``."""
    if any(votes[name]["no"] > votes[name]["yes"] for name, _ in VALIDATION_FIELDS):
        return "invalid"
    if all(votes[name]["yes"] > votes[name]["no"] for name, _ in VALIDATION_FIELDS):
        return "valid"
    return UNDECIDED


def _verdict_counts(verdicts: list[str]) -> dict:
    return {"n_valid": verdicts.count("valid"), "n_invalid": verdicts.count("invalid"),
            "n_undecided": verdicts.count(UNDECIDED)}


def _question_validation(study: Study, suspects: _Suspects) -> Part:
    """A question-validation study: ``question_validation``, per generalization question of its
    units, the counted verdicts against those the study asks (``short``: fewer counted than its
    ``annotators_per_unit`` per unit, ``VALIDATION_SHORT_RULE``; counted and named in
    ``short_questions``), the votes for each field and the question's verdict by the default reading
    (``VALIDATION_MAJORITY``, on each worker's verdict as ``VALIDATION_WORKER_VERDICT`` says) with the
    other readings' (``VALIDATION_ANSWER_CORRECTED``, ``VALIDATION_FIELD_MAJORITY``), the totals under
    each and how many questions each changes, and ``other_readings`` of which counted answers decide
    (``_reading_masks``: the verdict counts each gives). ``scoring.services.validation`` applies a
    run's verdicts."""
    units = Unit.objects.filter(study=study, generalization_question__isnull=False)
    n_units = Counter(units.values_list("generalization_question_id", flat=True))
    questions = list(units.values_list(
        "generalization_question_id", "generalization_question__item_id", "generalization_question__text",
        "generalization_question__qtype", "generalization_question__answer",
        "generalization_question__validation_status").distinct().order_by("generalization_question_id"))
    if not questions:
        raise ScoringError(f"Study {study.name!r} has no generalization questions to judge.")
    answers = _validation_answers(study)
    if answers.empty:
        raise ScoringError(f"Study {study.name!r} has no counted verdicts yet; nothing to score.")
    proposed = {int(question_id): answer for question_id, _, _, _, answer, _ in questions}
    verdicts = _question_verdicts(answers, proposed)
    rows = []
    for question_id, item_id, text, qtype, answer, status in questions:
        found = verdicts.get(question_id) or {
            "n_verdicts": 0, "votes": {name: dict.fromkeys(YES_NO, 0) for name, _ in VALIDATION_FIELDS},
            "verdicts": {"valid": 0, "invalid": 0}, VALIDATION_MAJORITY: UNDECIDED,
            VALIDATION_ANSWER_CORRECTED: UNDECIDED, VALIDATION_FIELD_MAJORITY: UNDECIDED,
            "suggested_corrected_answer": ""}
        asked = n_units[question_id] * study.annotators_per_unit
        rows.append({"question_id": question_id, "item_id": item_id, "text": text, "qtype": qtype,
                     "proposed_answer": answer, "status_when_scored": status, "n_verdicts_asked": asked,
                     "short": found["n_verdicts"] < asked, **found})
    default = [r[VALIDATION_MAJORITY] for r in rows]
    other = [r[VALIDATION_ANSWER_CORRECTED] for r in rows]
    per_field = [r[VALIDATION_FIELD_MAJORITY] for r in rows]
    n_differ = sum(a != b for a, b in zip(default, other, strict=True))
    n_field_differ = sum(a != b for a, b in zip(default, per_field, strict=True))
    short = [r for r in rows if r["short"]]
    # short questions a verdict was given to: the ones applying would change on fewer judges than asked
    short_decided = [r for r in short if r[VALIDATION_MAJORITY] != UNDECIDED]
    masks, rules = _reading_masks(study, answers, suspects)
    readings = {}
    for name, mask in masks.items():
        mask = np.asarray(mask, dtype=bool)
        kept = _question_verdicts(answers.loc[mask], proposed)
        reading = [kept.get(r["question_id"], {}).get(VALIDATION_MAJORITY, UNDECIDED) for r in rows]
        readings[name] = {"rule": rules[name], "n_answers": int(mask.sum()), "answers_left_out": int((~mask).sum()),
                          **_verdict_counts(reading),
                          "n_questions_verdict_differs": sum(a != b for a, b in zip(default, reading, strict=True))}
    block = {
        "default": VALIDATION_MAJORITY, "rules": dict(VALIDATION_RULES), "spec": VALIDATION_SPEC,
        "worker_verdict_rule": VALIDATION_WORKER_VERDICT,
        "n_questions": len(rows), "n_answers": int(len(answers)), **_verdict_counts(default),
        "n_ties": sum(1 for r in rows if r["n_verdicts"] and r[VALIDATION_MAJORITY] == UNDECIDED),
        "n_questions_without_verdicts": sum(1 for r in rows if not r["n_verdicts"]),
        "annotators_per_unit": study.annotators_per_unit,
        "short_questions": {"rule": VALIDATION_SHORT_RULE, "n_short": len(short),
                            "n_short_with_verdict": len(short_decided),
                            "question_ids": [r["question_id"] for r in short]},
        "readings": {VALIDATION_MAJORITY: _verdict_counts(default),
                     VALIDATION_ANSWER_CORRECTED: _verdict_counts(other),
                     VALIDATION_FIELD_MAJORITY: _verdict_counts(per_field)},
        "n_questions_readings_differ": n_differ,
        "n_questions_differ_by_reading": {VALIDATION_ANSWER_CORRECTED: n_differ,
                                          VALIDATION_FIELD_MAJORITY: n_field_differ},
        "n_questions_with_suggested_corrected_answer": sum(1 for r in rows if r["suggested_corrected_answer"]),
        "questions": rows,
        "other_readings": readings,
    }
    warnings = []
    if n_differ:
        warnings.append(f"{n_differ} generalization questions have another verdict when a corrected answer is "
                        "accepted (question_validation.rules.answer_corrected); the verdicts follow the majority "
                        "of worker verdicts.")
    if n_field_differ:
        warnings.append(f"{n_field_differ} generalization questions have another verdict when each field is decided "
                        "by its own majority (question_validation.rules.majority_per_field); the verdicts follow the "
                        f"majority of worker verdicts, {VALIDATION_WORKER_VERDICT}.")
    if short:
        warnings.append(f"{len(short)} generalization questions were judged by fewer workers than the study asks "
                        f"({study.annotators_per_unit} per question), {len(short_decided)} of them with a verdict "
                        "(question_validation.short_questions); applying the verdicts leaves them unchanged unless "
                        "short questions are applied explicitly.")
    return Part({"question_validation": block}, warnings)


def _accuracy_figures(g: pd.DataFrame) -> dict:
    """Figure 4's accuracy over units ``g`` by their majorities (``majority_readings``' figures)."""
    before, after = float(g["before_correct"].mean()), float(g["after_correct"].mean())
    return {"n": int(len(g)), "accuracy_before": before, "accuracy_after": after, "accuracy_delta": after - before}


def _conflicting_answers(frame: pd.DataFrame, units: pd.DataFrame) -> dict:
    """Figure 4 (accuracy before, after and delta, per source and over all) and the consistency of
    the answers over an item's questions (``BUNDLE_QUESTIONS``, bundles of the questions that count,
    ``units``, an incomplete one left out and counted: ``BUNDLE_INCOMPLETE_LEFT_OUT``) under each
    reading of ``genu.CONFLICTING_RULES``: a question its file gave twice with different answers
    kept with its first answer (the default, the published figures) or left out. Only the rule and
    the count when no counted question had conflicting answers."""
    n = int(frame.loc[frame["conflicted"], "question_id"].nunique())
    out = genu.conflicting_block(n)
    if not n:
        return out
    readings = {genu.CONFLICTING_FIRST_KEPT: frame, genu.CONFLICTING_LEFT_OUT: frame.loc[~frame["conflicted"]]}
    by_source: dict = {}
    for reading, rows in readings.items():
        groups = [(str(name), g) for name, g in rows.groupby("source", sort=True)] + [(pipeline.ALL, rows)]
        for name, g in groups:
            by_source.setdefault(name, {})[reading] = (
                {**_accuracy_figures(g), "n_questions": int(g["question_id"].nunique())} if len(g) else {"n": 0})
    members = _bundle_members(frame, units)
    kept = _with_complete(members.loc[~members["conflicted"]])
    out["by_source"] = by_source
    out["consistency"] = {
        "bundle": BUNDLE_QUESTIONS, "incomplete_rule": BUNDLE_INCOMPLETE_RULES[BUNDLE_INCOMPLETE_LEFT_OUT],
        **{reading: {"n_bundles_incomplete": int(m.loc[~m["complete"], "bundle"].nunique()),
                     **_steps(m.loc[m["complete"]], with_items=False)}
           for reading, m in {genu.CONFLICTING_FIRST_KEPT: members, genu.CONFLICTING_LEFT_OUT: kept}.items()}}
    return out


def _unvalidated_questions(frame: pd.DataFrame, units: pd.DataFrame, originals: pd.DataFrame, *,
                           by_utility: bool) -> dict:
    """Figure 4 under each reading of ``genu.QUESTION_READINGS``: the published figures count every
    question not marked invalid (the default), and under ``validated_only`` Figure 4 (all, by type,
    by utility, by source: ``_figure_4``) and its consistency (``_generalization_consistency``, a
    bundle being the item's validated questions) over the units of validated questions, composed as
    the published ones are (a unit's majority does not depend on the other units). Only the rules
    and the count when every counted question is validated (the two readings are the same)."""
    n = int(units.loc[units["unvalidated"], "question_id"].nunique())
    out = genu.unvalidated_block(n)
    if not n:
        return out
    rows, members = frame.loc[~frame["unvalidated"]], units.loc[~units["unvalidated"]]
    reading: dict = {"n_questions": int(members["question_id"].nunique()), "n_units_scored": int(len(rows))}
    if rows.empty:
        reading["note"] = "No validated question has a scored unit; there is nothing to score under this reading."
    else:
        reading.update(**_figure_4(rows, by_utility=by_utility, pairs=False),
                       consistency=_generalization_consistency(rows, members, originals))
    out[genu.QUESTIONS_VALIDATED_ONLY] = reading
    return out


# When a rationale has a property: the rule the properties model's results name.
MARK_RULE = ("a rationale has a property when more than half of its annotators marked it; an even split counts "
             "as not marked")


def _property_marks(study: Study) -> tuple[pd.DataFrame, list[str], int] | None:
    """Per (item, source) whether most annotators marked each property (0/1, ``MARK_RULE``), the
    property names and how many (rationale, property) marks were an even split; None without
    property annotations."""
    rows = Annotation.objects.filter(
        claim__in=claims_that_count(study=study), step=Annotation.Step.PROPERTIES
    ).values_list("claim__unit__item_id", "claim__unit__source_id", "payload")
    records = []
    for item_id, source_id, payload in rows.iterator():
        marks = property_marks(payload)
        if marks:
            records.append({**marks, "item_id": item_id, "source_id": source_id})
    if not records:
        return None
    df = pd.DataFrame.from_records(records)
    prop_cols = sorted(c for c in df.columns if c not in ("item_id", "source_id"))
    shares = df.groupby(["item_id", "source_id"])[prop_cols].mean()
    return shares.gt(0.5).astype(int).reset_index(), prop_cols, int(shares.eq(0.5).sum().sum())


# The properties model's cut-offs (ours: SPEC section 7 asks for "the properties and their
# interactions as fixed effects" and names no sample size). Pairwise interactions are fitted only with
# at least ``PROPERTIES_RATIONALES_PER_TERM`` rationales per fixed-effect term of the model with them
# (intercept, the k varying properties and their k(k-1)/2 pairs); the model at all only with at least
# ``PROPERTIES_MIN_RATIONALES`` rationales having both outcomes. Both are named in the results.
PROPERTIES_RATIONALES_PER_TERM = 10
PROPERTIES_MIN_RATIONALES = 10
PROPERTIES_INTERACTIONS_RULE = (
    f"pairwise interactions are fitted when there are at least {PROPERTIES_RATIONALES_PER_TERM} rationales per "
    "fixed-effect term of the model with them (1 + k + k(k-1)/2 terms for k varying properties) and k >= 2; "
    "otherwise main effects only. Our cut-off: SPEC section 7 asks for the properties and their interactions "
    "and names no sample size. Pairwise interactions only (no three-way or higher terms) is our reading of "
    "SPEC section 7's \"their interactions\"")
PROPERTIES_MIN_RATIONALES_RULE = (
    f"the model is fitted only with at least {PROPERTIES_MIN_RATIONALES} rationales that have property "
    "annotations and a utility, with both outcomes present. Our cut-off: SPEC section 7 names none")


def _properties_formula(safe: dict[str, str], n_rationales: int) -> tuple[str, bool, list[str]]:
    """SPEC section 7 asks for the properties and their interactions. Pairwise interactions are
    fitted when there are at least ``PROPERTIES_RATIONALES_PER_TERM`` rationales per fixed-effect
    term (``PROPERTIES_INTERACTIONS_RULE``); with fewer the model would be unidentifiable, so only
    main effects are fitted and the results say so."""
    k = len(safe)
    n_terms_with_interactions = 1 + k + k * (k - 1) // 2
    needed = PROPERTIES_RATIONALES_PER_TERM * n_terms_with_interactions
    if k >= 2 and n_rationales >= needed:
        return "useful ~ (" + " + ".join(safe.values()) + ") ** 2", True, []
    warnings = []
    if k >= 2:
        warnings.append(
            f"Properties model: pairwise interactions not fitted ({n_rationales} rationales; "
            f"{needed} needed for the {n_terms_with_interactions} terms); main effects only."
        )
    return "useful ~ " + (" + ".join(safe.values()) if safe else "1"), False, warnings


# The properties model's priors. SPEC section 7 names none: these are statsmodels' defaults, passed
# explicitly so that results.json states them. ``fe_p``: the prior standard deviation of each fixed
# effect (a log-odds); ``vcp_p``: the prior standard deviation of log(s), s the standard deviation
# of a random intercept.
PROPERTIES_FE_PRIOR_SD = 2.0
PROPERTIES_VC_PRIOR_SD = 1.0

# The outcome "useful vs not" (SPEC section 7) can be read two ways: the model is fitted with
# unsure counted as not useful, and the results also give the other reading, unsure left out.
OUTCOME_UNSURE_NOT_USEFUL = "useful (+1) against unsure (0) and not useful (-1) together"
# Which answers the model reads (``properties_model.answers_read``): it is fitted once, not under the
# counted answers' other readings, on the utility ``utility_from`` names (a lender's stored unit
# scores, or a bundle's table, each saying where it was read from).
PROPERTIES_ANSWERS_RULE = ("the property marks of the counted answers as published (counted_answers), against the "
                           "utility utility_from names; not refitted under any other reading of either")
OUTCOME_UNSURE_DROPPED = "useful (+1) against not useful (-1); unsure (0) rationales left out"


def _fit_properties(data: pd.DataFrame, prop_cols: list[str]) -> Part:
    """The properties model on ``data`` (one row per rationale, its properties, ``utility`` and
    ``useful``, the outcome, 0/1)."""
    varying = [c for c in prop_cols if data[c].nunique() > 1]
    safe = {c: f"p{i}" for i, c in enumerate(varying)}
    data = data.rename(columns=safe)
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    formula, with_interactions, warnings = _properties_formula(safe, len(data))
    vc = {"question": "0 + C(item_id)", "source": "0 + C(source_id)"}
    try:
        fit = BinomialBayesMixedGLM.from_formula(formula, vc, data, vcp_p=PROPERTIES_VC_PRIOR_SD,
                                                 fe_p=PROPERTIES_FE_PRIOR_SD).fit_vb()
    except Exception as exc:  # numerical failure of the fit: report, do not fail the whole scoring
        return Part({}, [*warnings, f"Properties model could not be fitted: {exc}"])
    names = {v: k for k, v in safe.items()}
    terms = {}
    for name, mean, sd in zip(fit.model.exog_names, fit.fe_mean, fit.fe_sd, strict=True):
        label = ":".join(names.get(part, part) for part in name.split(":"))
        terms[label] = {"log_odds": float(mean), "ci": [float(mean - 1.96 * sd), float(mean + 1.96 * sd)]}
    fixed = " + ".join(varying)
    return Part({"properties_model": {
        "formula": (f"useful ~ ({fixed}) ** 2" if with_interactions else f"useful ~ {fixed}")
        + " + (1 | question) + (1 | source)",
        "interactions": with_interactions,
        "interactions_rule": PROPERTIES_INTERACTIONS_RULE,
        "min_rationales": {"n": PROPERTIES_MIN_RATIONALES, "rule": PROPERTIES_MIN_RATIONALES_RULE},
        "method": "statsmodels BinomialBayesMixedGLM, variational Bayes; intervals are mean +/- 1.96 posterior sd",
        "priors": {"fe_p": PROPERTIES_FE_PRIOR_SD, "vcp_p": PROPERTIES_VC_PRIOR_SD},
        "n_rationales": int(len(data)),
        "terms": terms,
        "constant_properties_dropped": [c for c in prop_cols if c not in varying],
    }}, warnings)


def _properties_unsure_dropped(data: pd.DataFrame, prop_cols: list[str]) -> tuple[dict, list[str]]:
    """The other reading of "useful vs not" (``OUTCOME_UNSURE_DROPPED``), fitted the same way:
    its formula, n and terms, or why it was not fitted."""
    sub = data.loc[data["utility"] != 0].assign(useful=lambda d: (d["utility"] == 1).astype(int))
    block = {"outcome": OUTCOME_UNSURE_DROPPED, "n_rationales": int(len(sub))}
    if len(sub) < PROPERTIES_MIN_RATIONALES or sub["useful"].nunique() < 2:
        return {**block, "fitted": False, "not_fitted": (
            f"{len(sub)} rationales are useful or not useful (need at least {PROPERTIES_MIN_RATIONALES}, "
            "with both outcomes)")}, []
    fitted = _fit_properties(sub, prop_cols)
    warnings = [w.replace("Properties model", "Properties model, unsure left out", 1) for w in fitted.warnings]
    model = fitted.results.get("properties_model")
    if model is None:
        return {**block, "fitted": False, "not_fitted": warnings[-1] if warnings else "the fit failed"}, warnings
    keep = ("formula", "interactions", "terms", "constant_properties_dropped")
    return {**block, "fitted": True, **{k: model[k] for k in keep}}, warnings


def _properties_model(study: Study, frame: pd.DataFrame | None) -> Part:
    """Binomial mixed model (SPEC section 7): useful vs not ~ properties, random intercepts for
    question and source, fitted by statsmodels' BinomialBayesMixedGLM (variational Bayes) with the
    priors ``PROPERTIES_*_PRIOR_SD``. "Useful vs not" is coded ``OUTCOME_UNSURE_NOT_USEFUL``; SPEC
    leaves it open, so ``unsure_dropped`` gives the other reading (``OUTCOME_UNSURE_DROPPED``).
    Property annotations: ``Annotation(step="properties").payload`` as the worker's page stores it,
    ``{name: "yes" | "no"}``, read by ``steps.property_marks`` (the property names of
    ``steps.RATIONALE_PROPERTIES``); a rationale has a property when most of its annotators marked it. The
    outcome is this study's utility (``frame``), else the one other studies scored."""
    marks = _property_marks(study)
    if marks is None:
        return Part()
    agg, prop_cols, even_splits = marks
    borrowed = None
    if frame is not None and "utility" in frame:
        outcome = frame[["item_id", "source_id", "utility"]]
    else:
        lookup, borrowed = borrowed_utility(study)
        if borrowed.get("unavailable"):
            return Part({}, [f"Properties model not fitted: this study has no utility of its own, and "
                             f"{borrowed['unavailable']}."])
        outcome = lookup[["item_id", "source_id", "utility"]]
    data = agg.merge(outcome, on=["item_id", "source_id"], how="inner")
    data = data.assign(useful=(data["utility"] == 1).astype(int))  # OUTCOME_UNSURE_NOT_USEFUL
    if len(data) < PROPERTIES_MIN_RATIONALES or data["useful"].nunique() < 2:
        return Part({}, [
            f"Properties model not fitted: {len(data)} rationales have both property annotations and a utility, "
            f"{int(data['useful'].sum())} of them useful (need at least {PROPERTIES_MIN_RATIONALES}, with both useful "
            "and not-useful outcomes; our cut-off, SPEC names none)."
        ])
    fitted = _fit_properties(data, prop_cols)
    if "properties_model" in fitted.results:
        other, other_warnings = _properties_unsure_dropped(data, prop_cols)
        fitted.results["properties_model"].update({"mark_rule": MARK_RULE, "even_splits": even_splits,
                                                   "outcome": OUTCOME_UNSURE_NOT_USEFUL, "unsure_dropped": other,
                                                   "answers_read": PROPERTIES_ANSWERS_RULE})
        fitted.warnings.extend(other_warnings)
    if borrowed is not None and "properties_model" in fitted.results:
        fitted.results["properties_model"]["utility_from"] = borrowed
        fitted.warnings.extend(_utility_from_warnings(borrowed, "The properties model"))
    return fitted


FAITHFULNESS_KEYS = PROBABILITIES

# Which stored probabilities the figures leave out (counted per source in ``faithfulness.left_out``)
# and which they keep though nothing says which highlight they belong to.
FAITHFULNESS_LEFT_OUT_RULE = (
    "a rationale's stored probabilities are left out when they break the rule every write follows "
    "(studies.faithfulness_rules: p_full, p_highlight and p_without numbers in [0, 1], y_hat_from highlight or "
    "full, task_model, task_backend, method, imported_from and y_hat text): invalid; or when the highlight spans "
    "they were computed on, recorded with them, differ from the rationale's highlights now (edited or re-imported "
    "since): highlights_changed. Probabilities stored before the spans were recorded are kept and counted "
    "(spans_not_recorded per source): nothing says which highlight they were computed on")


@dataclass
class _Stored:
    """A source's usable probabilities (``vals``), the warnings about the rest and how many of
    its rationales were left out and why (``FAITHFULNESS_LEFT_OUT_RULE``)."""

    vals: list[dict]
    warnings: list[str]
    left_out: dict[str, int]
    spans_not_recorded: int


def _stored_probabilities(study: Study, source) -> _Stored:
    """The faithfulness probabilities stored for ``source``'s rationales of the study's items that
    the figures may use: valid (``faithfulness_rules``) and computed on the rationale's highlight."""
    rows = list(Rationale.objects.filter(source=source, item__in=study.items.all())
                .values_list("faithfulness", "highlights"))
    vals, invalid, changed, not_recorded, missing = [], [], 0, 0, 0
    for value, spans in rows:
        if not isinstance(value, dict) or not any(k in value for k in FAITHFULNESS_KEYS):
            missing += 1
            continue
        if problem := faithfulness_problem_text(value):
            invalid.append(problem)
            continue
        state = faithfulness_spans_state(value, spans)
        if state == SPANS_DIFFER:
            changed += 1
            continue
        not_recorded += state == SPANS_NOT_RECORDED
        vals.append(value)
    name, n = source.name, len(rows)
    warnings = []
    if invalid:
        warnings.append(f"Source {name}: {len(invalid)} of its {n} rationales of the study's items have faithfulness "
                        f"probabilities that are not valid ({invalid[0]}"
                        + (f"; and {len(invalid) - 1} more" if len(invalid) > 1 else "")
                        + "); they are left out of its sufficiency and comprehensiveness (compute or import them "
                          "again).")
    if changed:
        warnings.append(f"Source {name}: {changed} of its {n} rationales of the study's items have highlights that "
                        "differ from those their faithfulness probabilities were computed on (edited or re-imported "
                        "since); they are left out of its sufficiency and comprehensiveness (run the faithfulness "
                        "job again, or import the probabilities with the new highlights).")
    if not_recorded:
        warnings.append(f"Source {name}: {not_recorded} of the faithfulness probabilities used do not record the "
                        "highlight spans they were computed on (stored before the spans were recorded): they are "
                        "taken to belong to the rationales' highlights now.")
    if missing == n:
        warnings.append(f"Source {name} has highlights but no stored faithfulness probabilities: run "
                        "the faithfulness job or import them with its rationales.")
    elif missing:
        over = f"the other {len(vals)}" if len(vals) == n - missing else f"{len(vals)} of the other {n - missing}"
        warnings.append(f"Source {name}: {missing} of its {n} rationales of the study's items have no faithfulness "
                        f"probabilities; its sufficiency and comprehensiveness are over {over} (run the faithfulness "
                        "job for the rest).")
    return _Stored(vals, warnings, {"invalid": len(invalid), "highlights_changed": changed}, not_recorded)


def _source_faithfulness(name: str, vals: list[dict]) -> Part:
    full, hl, wo = ([v[k] for v in vals] for k in FAITHFULNESS_KEYS)
    rules = sorted({v.get("y_hat_from") or "highlight" for v in vals})
    warnings = []
    if len(rules) > 1:
        warnings.append(f"Source {name}: its faithfulness probabilities mix y_hat rules ({', '.join(rules)}); "
                        "run the faithfulness job again with one task model for all its rationales.")
    return Part({
        "n": len(vals),
        "sufficiency": metrics.sufficiency(full, hl),
        "comprehensiveness": metrics.comprehensiveness(full, wo),
        "y_hat_from": rules,
        "computed_by": sorted({v.get("task_model") or f"imported from {v.get('imported_from', '?')}" for v in vals}),
        "computed_with": _computed_with(vals),
        "y_hat_from_assumed": sum(1 for v in vals if y_hat_from_assumed(v)),
    }, warnings)


# What made a rationale's faithfulness probabilities, as the faithfulness job stores it with them
# (``studies.services.generation.faithfulness``): the task model and backend, and the scoring method,
# prompt and the task model's checkpoint (``faithfulness_rules.CHECKPOINT_KEY``: weights published
# later under the same path read apart) where the stored dict has them (None where it does not).
COMPUTED_WITH_KEYS = ("task_model", "task_backend", "method", "prompt", "checkpoint")


def _computed_with(vals: list[dict]) -> list[dict]:
    """The distinct ``COMPUTED_WITH_KEYS`` of ``vals`` (imported ones: ``imported_from``) with how
    many rationales each, the most common first."""
    def cell(value):  # a stored dict or list (a structured prompt, a checkpoint) is counted by its JSON text
        return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else (value or None)

    counts = Counter(
        (*(cell(v.get(key)) for key in COMPUTED_WITH_KEYS), None if v.get("task_model") else v.get("imported_from"))
        for v in vals)
    rows = [{**dict(zip(COMPUTED_WITH_KEYS, key[:-1], strict=True)), "imported_from": key[-1], "n_rationales": n}
            for key, n in counts.items()]
    return sorted(rows, key=lambda r: (-r["n_rationales"], json.dumps(r, sort_keys=True, default=str)))


def _faithfulness(study: Study) -> Part:
    """Opt-in. Reads the probabilities stored per rationale in ``Rationale.faithfulness``
    (``{"p_full", "p_highlight", "p_without"}``, probabilities of y_hat, and ``y_hat_from``, the
    rule that chose it), written by the faithfulness job or imported with the rationales (the
    import format's y_hat is predicted from the highlight, as are those of jobs that predate the
    rule). The figures over all sources are named after the study's split. A source of the study
    without highlights (``has_highlights`` off) has no faithfulness: it is named in
    ``skipped_sources``, with a warning, so the figures say which sources they leave out."""
    per_source, warnings, pooled, left_out, skipped = {}, [], [], {}, []
    for source in study.sources.all():
        if not source.has_highlights:
            skipped.append(source.name)
            continue
        stored = _stored_probabilities(study, source)
        warnings += stored.warnings
        if any(stored.left_out.values()):
            left_out[source.name] = stored.left_out
        if stored.vals:
            row = _source_faithfulness(source.name, stored.vals)
            per_source[source.name] = {**row.results, "spans_not_recorded": stored.spans_not_recorded}
            warnings += row.warnings
            pooled += stored.vals
    rules_used = {rule for row in per_source.values() for rule in row["y_hat_from"]}
    assumed = sorted(name for name, row in per_source.items() if row["y_hat_from_assumed"])
    if assumed:
        warnings.append(f"Faithfulness of {', '.join(assumed)}: the y_hat rule of imported probabilities was not "
                        f"given and is assumed: {FAITHFULNESS_ASSUMPTION}.")
    split = study.split
    results = {"faithfulness": {"per_source": per_source, "split": split, "y_hat_from": sorted(rules_used),
                                "spec_rule": faithfulness_spec_rule(
                                    {name: row["y_hat_from"] for name, row in per_source.items()}, assumed),
                                "y_hat_from_assumed": {"sources": assumed, "assumption": FAITHFULNESS_ASSUMPTION},
                                "left_out": left_out, "left_out_rule": FAITHFULNESS_LEFT_OUT_RULE,
                                "skipped_sources": sorted(skipped),
                                "caveats": metrics.faithfulness_caveats(rules_used)}}
    if skipped:
        warnings.append(f"Faithfulness leaves out {', '.join(sorted(skipped))}: the study lists them but they have "
                        f"no highlights, so the {split} sufficiency and comprehensiveness are over the other "
                        "sources only.")
    if len(rules_used) > 1:
        warnings.append(f"The {split} sufficiency and comprehensiveness over all sources mix y_hat rules "
                        f"({', '.join(sorted(rules_used))}): compare sources within one rule.")
    if not pooled:
        warnings.append("Faithfulness is on but no source of this study has stored highlight probabilities.")
        return Part({**results, f"{split}_sufficiency": None, f"{split}_comprehensiveness": None}, warnings)
    full, hl, wo = ([v[k] for v in pooled] for k in FAITHFULNESS_KEYS)
    results[f"{split}_sufficiency"] = metrics.sufficiency(full, hl)
    results[f"{split}_comprehensiveness"] = metrics.comprehensiveness(full, wo)
    return Part(results, warnings)


# --- utility study ---------------------------------------------------------------------------


def _imported_frame(study: Study) -> pd.DataFrame:
    rows = UnitScore.objects.filter(study=study, imported=True).values_list(
        "id", "item_id", "source_id", "source__name", "item__gold_answer", "before_majority", "after_majority",
        "before_tie", "after_tie", "n_annotators", "reported_utility",
    )
    df = pd.DataFrame.from_records(list(rows), columns=[
        "unit_id", "item_id", "source_id", "source", "gold", "before_majority", "after_majority",
        "before_tie", "after_tie", "n_annotators", "reported_utility"])
    for step in ("before", "after"):
        df[f"{step}_majority"] = df[f"{step}_majority"].astype(object).where(~df[f"{step}_tie"], None)
    return pipeline.add_utility(df)


def _imported_outcomes(study: Study) -> Part:
    """The per-unit table of an imported outcome study (its majorities, as imported), with
    ``n_units``, ``ties``, ``imported_utility_check`` and (empty) ``agreement``."""
    frame = _imported_frame(study)
    if frame.empty:
        raise ScoringError(f"Study {study.name!r} is an imported outcome without rows; import the outcomes file first.")
    reported = frame["reported_utility"].notna()
    mismatch = reported & (frame["reported_utility"].fillna(99).astype(int) != frame["utility"])
    warnings = []
    if mismatch.any():
        warnings.append(f"{int(mismatch.sum())} imported rows state a utility that differs from the one recomputed "
                        "from their before/after answers; the recomputed one is used.")
    warnings.append("Agreement needs the raw annotations; imported outcomes hold only the majorities.")
    return Part({
        "n_units": int(len(frame)),
        "ties": {"before": int(frame["before_tie"].sum()), "after": int(frame["after_tie"].sum()),
                 "units_with_tie": int((frame["before_tie"] | frame["after_tie"]).sum())},
        "imported_utility_check": {"compared": int(reported.sum()), "mismatches": int(mismatch.sum())},
        "agreement": {},
    }, warnings, frame)


def _items_without_rationale(study: Study) -> Part:
    """``n_items_without_rationale``: per source, the study's items (its drawn items and those of
    its units) less the items with a unit of that source. An (item, source) pair whose LM output
    did not parse has no rationale, so no unit and no task_correct: task accuracy and U(utility |
    task accuracy) leave it out rather than count it wrong, and a warning says so when non-zero."""
    if study.is_imported_outcome:
        units = UnitScore.objects.filter(study=study, imported=True)
    else:
        units = Unit.objects.filter(study=study, generalization_question__isnull=True)
    pairs = set(units.values_list("item_id", "source__name").distinct())
    items = set(study.items.values_list("id", flat=True)) | {item for item, _ in pairs}
    names = {s.name for s in study_sources(study)} | {s for _, s in pairs if s is not None}
    counts = {name: len(items - {item for item, s in pairs if s == name}) for name in sorted(names)}
    warnings = [f"Source {name}: {n} of the study's {len(items)} items have no rationale of it (its output did not "
                f"parse, or none was made), so no unit; its task accuracy and U(utility | task accuracy) are over "
                f"the items it has a rationale for and leave these out rather than count them wrong."
                for name, n in counts.items() if n]
    return Part({"n_items_without_rationale": counts}, warnings)


# The two readings of task accuracy where a source has no rationale for an item (its LM output did
# not parse, or none was made): SPEC does not say how such an item counts (``genu.UNPARSED_SPEC``), so
# the published figure keeps the default and ``task_accuracy_readings`` gives the other beside it.
TASK_ACCURACY_LEFT_OUT = "items_left_out"
TASK_ACCURACY_COUNTED_WRONG = "items_counted_wrong"
TASK_ACCURACY_RULES = {
    TASK_ACCURACY_LEFT_OUT: "items without a rationale left out: correct / scored units (the published figure)",
    TASK_ACCURACY_COUNTED_WRONG: "items without a rationale counted as wrong: correct / (scored units + items "
                                 "without a rationale)",
}


def task_accuracy_readings(frame: pd.DataFrame, results: dict) -> dict:
    """``task_accuracy_readings``: task accuracy under each rule of ``TASK_ACCURACY_RULES``, per
    source and over all (``pipeline.ALL``), with its counts: ``n_correct`` and ``n_units`` (the
    scored units with the source's predicted answer, ``task_accuracy_n``) from ``frame``, the per-unit
    table, and ``n_items_without_rationale`` from ``results``. The default reading's figure is
    ``task_accuracy``'s; the other counts the items without a rationale as wrong. Empty when the
    units carry no predicted answer."""
    if "task_correct" not in frame or "n_items_without_rationale" not in results:
        return {}
    has = frame.dropna(subset=["task_correct"])
    correct = has["task_correct"].astype(bool).groupby(has["source"].astype(str)).sum()
    units = has["source"].astype(str).value_counts()
    missing = results["n_items_without_rationale"]
    names = sorted(set(units.index) | {name for name, n in missing.items() if n})
    rows = [(name, int(correct.get(name, 0)), int(units.get(name, 0)), int(missing.get(name, 0))) for name in names]
    rows.append((pipeline.ALL, sum(r[1] for r in rows), int(len(has)), sum(r[3] for r in rows)))
    by_source = {}
    for name, right, n, left_out in rows:
        by_source[name] = {
            "n_correct": right, "n_units": n, "n_items_without_rationale": left_out,
            TASK_ACCURACY_LEFT_OUT: _share(right, n),
            TASK_ACCURACY_COUNTED_WRONG: _share(right, n + left_out),
        }
    return {"default": TASK_ACCURACY_LEFT_OUT, "rules": dict(TASK_ACCURACY_RULES), "spec": genu.UNPARSED_SPEC,
            "by_source": by_source}


def _annotate(study: Study, *, similarity: bool, similarity_from: str = SIMILARITY_FROM_CALLER):
    """What a utility study's units get from outside the answers: the source's task accuracy
    (with ``n_items_without_rationale``, the items it leaves out), Gen-U and similarity to the
    gold rationale (``pipeline.score_units``'s ``annotate``)."""

    def annotate(frame: pd.DataFrame) -> Part:
        frame = frame.assign(task_correct=_task_correct(study, frame))
        missing = _items_without_rationale(study)
        score_stage("Gen-U")
        gen_u = gen_u_results(frame, reader=study.owner)
        score_stage("similarity to the gold rationale (BERTScore)")
        sim = _similarity(gen_u.frame, enabled=similarity, dataset=study.dataset.name, requested_from=similarity_from)
        score_stage("shares, intervals and associations")
        return pipeline.merge([missing, gen_u, sim], frame=sim.frame)

    return annotate


def _next_to(results: dict, key: str, after: str) -> dict:
    """``results`` with ``key`` moved to just after ``after`` (where a reader of that figure looks)."""
    if key not in results or after not in results:
        return results
    value = results.pop(key)
    out = {}
    for name, v in results.items():
        out[name] = v
        if name == after:
            out[key] = value
    return out


# What ``majority_readings`` says where it cannot be computed or of a study that stopped units early.
MAJORITY_IMPORTED_YES_NO = ("imported outcomes hold only each unit's majority, but every item has two choices, so a "
                            "plurality is more than half of the annotators: the readings coincide")
MAJORITY_IMPORTED = ("imported outcomes hold only each unit's majority, not its answers: the strict reading cannot "
                     "be computed")
MAJORITY_EARLY_STOPPING = ("units were stopped early when the default (plurality) reading decided them "
                           "(studies.majority.outcome_decided); the strict reading is computed on the answers they had")


def _majority_readings(study: Study, frame: pd.DataFrame, answers: pd.DataFrame | None, figures=None) -> dict:
    """``majority_readings``: the figures under each reading of the majority rule (SPEC section 2
    leaves open whether a plurality short of half is a majority; ``pipeline.majority_readings``).
    ``figures``: what each reading gives (default: the utility shares). Imported outcomes have no
    answers: on a yes/no dataset the readings coincide; otherwise the block says the strict reading
    cannot be computed."""
    if answers is None:
        yes_no = study.dataset.is_yes_no
        return {"default": MAJORITY_RULE, "rules": dict(MAJORITY_RULES), "spec": MAJORITY_SPEC,
                "n_units": int(len(frame)), "coincide": True if yes_no else None,
                "note": MAJORITY_IMPORTED_YES_NO if yes_no else MAJORITY_IMPORTED}
    block = pipeline.majority_readings(frame, answers, figures)
    if study.stop_when_decided and not block.get("coincide"):
        block["early_stopping"] = MAJORITY_EARLY_STOPPING
    return block


def _utility(study: Study, suspects: _Suspects, *, both_directions: bool, similarity: bool,
             similarity_from: str = SIMILARITY_FROM_CALLER) -> Part:
    annotate = _annotate(study, similarity=similarity, similarity_from=similarity_from)
    if study.is_imported_outcome:
        part = pipeline.score_units(_imported_outcomes(study), annotate=annotate, both_directions=both_directions)
        part.results["majority_readings"] = _majority_readings(study, part.frame, None)
    else:
        units = _units_frame(study, generalization=False)
        if units.empty:
            raise NothingScored(f"Study {study.name!r} has no units; create its units (or import outcomes) first.")
        answers = _annotation_frame(study, generalization=False)
        try:
            part = pipeline.score_frames(
                units, answers, expected_raters=study.annotators_per_unit,
                annotate=annotate, both_directions=both_directions, what=f"Study {study.name!r}",
            )
        except ScoringError as exc:  # no unit has a completed answer (left, e.g., by a withdrawal)
            raise NothingScored(str(exc)) from exc
        masks, rules = _reading_masks(study, answers, suspects)
        readings = pipeline.other_readings(units, answers, masks, part, expected_raters=study.annotators_per_unit)
        part.results[READINGS_KEY] = {name: {"rule": rules[name], **row} for name, row in readings.items()}
        part.results["majority_readings"] = _majority_readings(study, part.frame, answers)
    part.results = _next_to(part.results, "majority_readings", "ties")
    part.results = _next_to(part.results, "n_items_without_rationale", "task_accuracy")
    readings = task_accuracy_readings(part.frame, part.results)
    if readings:
        part.results["task_accuracy_readings"] = readings
        part.results = _next_to(part.results, "task_accuracy_readings", "n_items_without_rationale")
    # which sources each ``all`` pools, the gold-kind ones named, and the reading without them
    part.results["all_sources"] = pipeline.all_sources(part.frame, _gold_sources(part.frame).values())
    return part


# What a run writes over on a unit's existing row (``_store_unit_scores``): every field but the row's
# key (``unit_score_unique``: study, item, source), its id and ``imported``; ``updated_at`` included.
UNIT_SCORE_KEY = ("study", "item", "source")
UNIT_SCORE_STORED = tuple(f.name for f in UnitScore._meta.concrete_fields
                          if not f.primary_key and f.name not in (*UNIT_SCORE_KEY, "imported"))


# What a run computes for an imported outcome's row, and so all it writes there (``_store_unit_scores``).
IMPORTED_SCORED = ("before_correct", "after_correct", "utility", "task_correct", "gen_u", "similarity")


def _imported_read(row) -> tuple:
    """What a run reads of an imported outcome's row (``_imported_frame``), from the row or the run's
    record of it: its majorities (None for a tie), ties and number of annotators."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name)
    ties = (bool(get("before_tie")), bool(get("after_tie")))
    majorities = tuple(None if tie or not isinstance(m := get(f"{step}_majority"), str) or not m else m
                       for step, tie in zip(("before", "after"), ties, strict=True))
    n = get("n_annotators")
    return (*majorities, *ties, None if n is None or (isinstance(n, float) and np.isnan(n)) else int(n))


def _store_unit_scores(study: Study, frame: pd.DataFrame, *, run: ScoreRun) -> None:
    """Write the per-unit table of ``run`` to the study's ``UnitScore`` rows, each naming ``run``
    (``score_run``) as the run that scored it.

    Rows are written in place, by their key (study, item, source), so a unit keeps its row and id
    from run to run (a reader paging ``/api/v1/scores/`` while a run stores neither skips nor
    repeats a unit); the collected rows of units the run did not score are removed. The rows of
    imported outcomes are only updated, never removed, and only with what the run computed
    (``IMPORTED_SCORED``): their imported fields (majorities, ties, ``n_annotators``) are the
    import's alone. Imported rows that are no longer those the run read (an outcomes import changed,
    added or removed rows while it computed) raise ``ScoringError`` and nothing is written."""

    def val(v):
        return None if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA else v

    fields = dict(
        n_annotators="n_annotators", before_tie="before_tie", after_tie="after_tie",
        before_correct="before_correct", after_correct="after_correct", utility="utility",
        task_correct="task_correct", gen_u="gen_u", similarity="similarity",
    )
    records = frame.to_dict("records")
    if study.is_imported_outcome:
        by_id = {u.pk: u for u in UnitScore.objects.filter(study=study, imported=True)}
        changed = []
        for rec in records:
            unit = by_id.get(rec["unit_id"])
            if unit is None or _imported_read(unit) != _imported_read(rec) or len(by_id) != len(records):
                raise ScoringError(
                    f"Study {study.name!r}: its outcomes were imported again while this run computed (its rows are "
                    "no longer those it read): score the study again. This run stored nothing.")
            for field in IMPORTED_SCORED:
                v = val(rec.get(fields[field]))
                setattr(unit, field, int(v) if field in ("utility", "gen_u") and v is not None else v)
            unit.score_run = run
            changed.append(unit)
        UnitScore.objects.bulk_update(changed, [*IMPORTED_SCORED, "score_run"], batch_size=1000)
        return
    objs = []
    for rec in records:
        kwargs = {field: val(rec.get(col)) for field, col in fields.items()}
        for f in ("utility", "gen_u", "n_annotators"):
            if kwargs[f] is not None:
                kwargs[f] = int(kwargs[f])
        objs.append(UnitScore(
            study=study, item_id=rec["item_id"], source_id=rec["source_id"],
            before_majority=rec.get("before_majority") or "", after_majority=rec.get("after_majority") or "",
            score_run=run, **kwargs,
        ))
    UnitScore.objects.bulk_create(objs, batch_size=1000, update_conflicts=True, unique_fields=UNIT_SCORE_KEY,
                                  update_fields=UNIT_SCORE_STORED)
    _remove_unscored_unit_scores(study, run=run)


def _remove_unscored_unit_scores(study: Study, *, run: ScoreRun) -> None:
    """Remove the study's collected ``UnitScore`` rows of the units ``run`` does not score: every row
    it scored names it (``_store_unit_scores``), so the others are units it no longer scores (all of
    them for a run that scored none, ``NothingScored``). Imported outcomes' rows are never removed.
    Call under the study's store lock (``runs.score_run_store_lock``)."""
    UnitScore.objects.filter(study=study, imported=False).exclude(score_run=run).delete()


# What each source's rationales were made with, read from their ``generation_info`` (the keys the
# rationale job writes: ``studies.services.generation.rationales``): one row per distinct combination.
# ``demonstrations_fingerprint`` is the fingerprint of the demonstrations' full content (their keys
# alone do not tell an edited text apart), as the rationale recorded it; ``backend`` is the one the
# rationale was made by (a source switched from a local model to an endpoint serving a model of the same
# name keeps its name and model). A key a rationale made before it was recorded lacks reads as None:
# such rationales group as they always did.
GENERATION_KEYS = ("backend", "model", "decoding", "template", "seed", "demonstrations_fingerprint")
# What else each rationale records of how it was made that changes the outputs (``backend_run_info``:
# the endpoint a request went to and whether it was sent as chat or completions; the device, the
# weights' dtype and the torch and transformers versions of a local model: bf16 on a GPU and fp32 on
# the CPU give different greedy outputs). The rows are grouped by them too, and the report names them.
GENERATION_RUN_KEYS = ("endpoint_url", "api", "device", "dtype", "torch", "transformers")
# What tells two prompts apart beyond those keys: the few-shot demonstrations (their keys, in the
# prompt's order), the template's own text (every source template is named "custom") and the
# trained checkpoint the source loaded (``checkpoint``: its training record's fingerprint, so
# weights a later fine-tuning or Quark job published under the same source name read apart). The
# rows are grouped by them too, and each row records them as ``<key>_hash`` (``generation_hash``),
# so two prompts made with the same seed and template name never read as one.
GENERATION_HASHED_KEYS = ("demonstrations", "template_text", "checkpoint")
GENERATION_HASH_RULE = ("the first 12 hex digits of the SHA-256 of the value's canonical JSON (keys sorted, no spaces, "
                        "UTF-8); None when the rationale does not record it")


def device_kind(device) -> str | None:
    """The kind of device a rationale records, as results.json's generation rows group it: "cuda" for
    "cuda:1" (two workers pinned to two GPUs of one kind run the same model alike; a GPU and the CPU
    do not)."""
    return device.split(":", 1)[0] if isinstance(device, str) and device else device


def endpoint_shown(url) -> str | None:
    """An endpoint a rationale records, as results.json and the report name it: scheme, host, port
    and path, never credentials, a query or a fragment it may carry. None for none (a local model)."""
    if not isinstance(url, str) or not url:
        return None
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        netloc = f"[{netloc}]" if ":" in netloc else netloc  # an IPv6 address keeps its brackets
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "(not a URL)"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def generation_hash(value) -> str | None:
    """``GENERATION_HASH_RULE``: a short, stable fingerprint of a stored demonstrations list or
    template text (None when not recorded)."""
    return None if value is None else json_fingerprint(value)


def study_sources(study: Study):
    """The study's sources: its design's, and those of its units and unit scores (a study whose
    units were made by hand, or imported outcomes, may name sources its design does not), by name.
    The results' ``sources`` and the per-source summary (``export_units.source_summaries``) list these."""
    return RationaleSource.objects.filter(
        Q(studies=study) | Q(pk__in=Unit.objects.filter(study=study).values("source_id"))
        | Q(pk__in=UnitScore.objects.filter(study=study).values("source_id"))).distinct().order_by("name")


def _sources(study: Study) -> dict:
    """``results["sources"]``: per source, what it is now (kind, backend, model, the fine-tuning
    preset or method when it was trained here, and ``checkpoint_hash``, the checkpoint it loads:
    ``inputs.source_checkpoint``) and ``generation``, the distinct (backend, model, decoding, template,
    seed, demonstrations_fingerprint; endpoint_url, api, device, dtype, torch, transformers;
    demonstrations_hash, template_text_hash, checkpoint_hash: ``GENERATION_KEYS``,
    ``GENERATION_RUN_KEYS``, ``GENERATION_HASHED_KEYS``) its rationales of the
    study's items record in ``generation_info``, with how many rationales each (one grouped query;
    no rationale text is read)."""
    sources = list(study_sources(study))
    items = (Q(item__in=study.items.all()) | Q(item__in=Unit.objects.filter(study=study).values("item_id"))
             | Q(item__in=UnitScore.objects.filter(study=study).values("item_id")))
    keys = (*GENERATION_KEYS, *GENERATION_RUN_KEYS, *GENERATION_HASHED_KEYS)
    rows = (Rationale.objects.filter(items, source__in=[s.pk for s in sources])
            .values("source_id", *(f"generation_info__{key}" for key in keys))
            .annotate(n=Count("id")).order_by())
    loaded = {source.pk: source_checkpoint(source) for source in sources}  # one read of each source's checkpoint
    weights = {source.pk: _checkpoints_known(source, loaded[source.pk]) for source in sources}
    combos: dict[int, dict[str, dict]] = {}
    for row in rows:
        combo = ({key: row[f"generation_info__{key}"] for key in (*GENERATION_KEYS, *GENERATION_RUN_KEYS)}
                 | {"endpoint_url": endpoint_shown(row["generation_info__endpoint_url"]),
                    "device": device_kind(row["generation_info__device"])}
                 | {f"{key}_hash": generation_hash(row[f"generation_info__{key}"]) for key in GENERATION_HASHED_KEYS}
                 | {"checkpoint_replaced": _checkpoint_replaced(row["generation_info__checkpoint"],
                                                                weights[row["source_id"]])})
        # rows the database told apart by a JSON spelling alone (key order) hash the same: one row
        same = combos.setdefault(row["source_id"], {}).setdefault(json.dumps(combo, sort_keys=True, default=str),
                                                                  {**combo, "n_rationales": 0})
        same["n_rationales"] += row["n"]
    generation = {source_id: list(counted.values()) for source_id, counted in combos.items()}
    out = {}
    for source in sources:
        training = source.training or {}
        combos = sorted(generation.get(source.pk, []), key=lambda c: (-c["n_rationales"], json.dumps(c, sort_keys=True,
                                                                                                      default=str)))
        out[source.name] = {
            "kind": source.kind, "backend": source.backend, "model_name_or_path": source.model_name_or_path,
            # a fine-tuned checkpoint's preset and mode (``finetune``), or another method's name (``quark``)
            "training_preset": training.get("preset"), "training_mode": training.get("mode"),
            "training_method": training.get("method"),
            # the checkpoint it loads now, hashed as each generation row's ``checkpoint_hash`` (a row
            # made by weights since replaced says so: ``checkpoint_replaced``)
            "checkpoint_hash": generation_hash(loaded[source.pk]),
            "generation": combos,
        }
    return out


def _checkpoints_known(source: RationaleSource, registered: list[str] | None) -> set[str]:
    """The fingerprints of the training records of the weights ``source`` loads now: those its
    trained sources register (``registered``: ``inputs.source_checkpoint``), and that of the record in its model's
    folder (``model_paths.folder_training_record``: the weights are there even where the source that
    registered them was deleted or pointed elsewhere). Empty where nothing here says (an untrained
    model, a folder this host cannot read, a bundle copy without the training source)."""
    known = set(registered or [])
    in_folder = folder_training_record(source.model_name_or_path)
    if in_folder is not None:
        known.add(json_fingerprint(in_folder))
    return known


def _checkpoint_replaced(recorded, known: set[str]) -> bool | None:
    """Whether a rationale recording ``recorded`` (its ``generation_info["checkpoint"]``: training
    record fingerprints) was made by weights its source no longer loads: True when one of them is
    not among ``known`` (:func:`_checkpoints_known`), False when all are, None when it records none
    (made before checkpoints were recorded, or by an untrained model) or nothing here is known of
    the source's weights. A source added over the same folder adds a fingerprint, not a replacement."""
    if not isinstance(recorded, list) or not recorded or not known:
        return None
    return any(fingerprint not in known for fingerprint in recorded)


def _header(study: Study, run: ScoreRun | None = None) -> Part:
    """``schema_version``, ``run`` (which run made these results: its id, when it finished and when
    it began reading the answers (``read_at``), both filled in as it finishes, the app's version and
    commit and the scoring packages' versions, ``scoring.provenance``), ``study``, ``bootstrap`` and
    ``sources``."""
    return Part({
        "schema_version": SCHEMA_VERSION,
        "run": {"id": run.pk if run is not None else None, "finished_at": None, "read_at": None,
                "app": app_version(), "packages": package_versions()},
        "study": {
            "id": study.pk, "name": study.name, "kind": study.kind, "dataset": study.dataset.name,
            "is_imported_outcome": study.is_imported_outcome, "annotators_per_unit": study.annotators_per_unit,
            "stop_when_decided": study.stop_when_decided,
            # which of the dataset's items: the split, and the seeded sample of it (None: all of them)
            "split": study.split, "item_sample_size": study.item_sample_size, "sample_seed": study.sample_seed,
        },
        # every interval of these results (``metrics.bootstrap``; the report's notes read it here)
        "bootstrap": {"method": "percentile", "confidence": 0.95, "n_resamples": DEFAULT_RESAMPLES,
                      "seed": DEFAULT_SEED},
   
        # what each source is and what its rationales were made with (``_sources``)
        "sources": _sources(study),
    })


def _compute(study: Study, *, both_directions: bool, similarity: bool,
             run: ScoreRun | None = None, similarity_from: str = SIMILARITY_FROM_CALLER
             ) -> tuple[dict, pd.DataFrame | None]:
    """Reads and computes, writes nothing: ``results.json`` merged from each step's part, and the
    per-unit table of a utility study (None otherwise). ``similarity_from``: who chose ``similarity``
    (``SIMILARITY_FROM_*``), recorded beside it."""
    score_stage("reading the answers and their majorities")
    parts = [_header(study, run)]
    frame = readings = short = None
    readings_at: dict[str, str] = {}  # where each other reading of the counted answers is, when not in counted_answers
    suspects = _suspect_work(study)  # read once: the other readings and counted_answers share them
    if study.kind == Study.Kind.GENERALIZATION:
        parts.append(generalization := _generalization(study, suspects))
        readings = generalization.results.pop(READINGS_KEY, None)
        short = generalization.results.pop(SHORT_UNITS_KEY, None)
    elif study.kind == Study.Kind.QUESTION_VALIDATION:
        parts.append(validation := _question_validation(study, suspects))
        readings_at = {name: f"question_validation.other_readings.{name}"
                       for name in validation.results["question_validation"]["other_readings"]}
    elif study.kind == Study.Kind.UTILITY:
        parts.append(utility := _utility(study, suspects, both_directions=both_directions, similarity=similarity,
                                         similarity_from=similarity_from))
        frame = utility.frame
        readings = utility.results.pop(READINGS_KEY, None)
        short = utility.results.get("short_units")
    if study.stop_when_decided:
        parts.append(Part({"early_stopping": _early_stopping(study, short)}))
    parts.append(properties := _properties_model(study, frame))
    if study.kind not in (Study.Kind.UTILITY, Study.Kind.GENERALIZATION, Study.Kind.QUESTION_VALIDATION) \
            and not properties.results:
        why = "".join(f" {warning}" for warning in properties.warnings)  # why the model was not fitted
        raise ScoringError(f"Study {study.name!r} ({study.get_kind_display()}) has nothing to score yet.{why}")
    if study.faithfulness_enabled:
        parts.append(_faithfulness(study))
    if not study.is_imported_outcome:
        parts.append(_counted_answers(study, readings=readings, suspects=suspects, readings_at=readings_at))
    parts.append(_withdrawals(study))
    merged = pipeline.merge(parts)
    return pipeline.clean_json({**merged.results, "warnings": merged.warnings}), frame


# What a score counts (``annotations.selectors.claims_that_count``), said in the results.
COUNTED = ("the answers of completed questions in submitted or approved tasks; active, returned, expired, "
           "rejected and on-hold work is left out, and a submitted task counts until it is rejected")


# The other readings of which counted answers the figures rest on (SPEC is silent): each one is
# the published composition on the answers it keeps (``pipeline.other_readings``).
READINGS_KEY = "_counted_answers_readings"
# Where ``_generalization`` hands ``_compute`` its short units (``pipeline.short_units``) for
# ``_early_stopping``; popped before the results are merged, like ``READINGS_KEY``.
SHORT_UNITS_KEY = "_short_units"


def hold_rule() -> str:
    """What puts work on hold (``annotations.selectors.on_hold``), with the setting it depends on as
    this installation has it when the run scores: said in the results beside the count of held work.
    Each hold was placed by a sync with that setting as it read then, which the text says (no hold
    records it)."""
    return ("work sync held and no researcher cleared: the platform's worker id is not the participant's "
            "(worker_mismatch), the platform lists as submitted work whose task here never was "
            "(not_submitted_here), Prolific lists the session of work submitted here as timed out or returned "
            "(ended_on_platform), or Prolific does not list the session it was answered under "
            "(not_on_platform), looked for once a task is RL_SYNC_UNLISTED_GRACE_MINUTES old "
            f"({settings.RL_SYNC_UNLISTED_GRACE_MINUTES:g} minutes as it stood when this run scored; each hold was "
            "placed by a sync with the value it read then): younger work counts until a sync after that")


def expiry_rule(study: Study) -> str:
    """What makes a task expire, its completed answers then left out (``answers_expired``), with the
    settings it depends on as this installation has them (``annotations.services.release``): said
    in the results beside the count of expired work. An unset setting is described by its rule. A study
    that opened has its own minutes, fixed then (``deadlines.task_minutes_fixed``): those are said,
    not the settings as they read now."""
    task = settings.RL_ASSIGNMENT_MINUTES
    first = settings.RL_FIRST_ANSWER_MINUTES
    task_text = (f"{float(task):g} minutes (RL_ASSIGNMENT_MINUTES)" if task else
                 "four times the study's estimated minutes per task, at least 30 minutes (RL_ASSIGNMENT_MINUTES unset)")
    first_text = (f"{float(first):g} minutes (RL_FIRST_ANSWER_MINUTES)" if first else
                  "the study's estimated minutes per task, at least 10 minutes (RL_FIRST_ANSWER_MINUTES unset)")
    minutes = (f"{assignment_duration(study).total_seconds() / 60:g} and "
               f"{first_answer_window(study).total_seconds() / 60:g} minutes")
    if task_minutes_fixed(study):  # its own, fixed when it opened: the settings now may say otherwise
        return ("a task expires when it is not submitted within its time, or gets no first answer within its "
                "first-answer window, never longer than the task's time; for this study they were fixed when it "
                "opened (a study already open when they began to be recorded: by migration studies 0016, from the "
                "settings of the deploy that ran it), from RL_ASSIGNMENT_MINUTES and RL_FIRST_ANSWER_MINUTES as they "
                "read then (unset: four times "
                f"its estimated {float(study.estimated_minutes_per_task):g} minutes per task, at least 30, and the "
                f"estimate, at least 10): {minutes}. An expired task's completed answers are left out of the figures")
    return (f"a task expires when it is not submitted within its time, {task_text}, or gets no first answer within "
            f"{first_text}, never longer than the task's time; for this study "
            f"(estimated {float(study.estimated_minutes_per_task):g} minutes per task) that is "
            f"{minutes} as the settings stand now. An expired "
            "task's completed answers are left out of the figures")


FAILED_ANY = ("a task failed its attention checks when any one of them was answered wrong (the rule "
              "tasks_failing_an_attention_check counts)")
FAILED_EVERY = "a task failed its attention checks when every one of them was answered wrong (a task without any stays)"
# Speeders (answers far too fast to have been read): the threshold and the timing are the review
# page's and the pay quote's (``annotations.selectors.cost``, ``annotations.selectors.review``).
SPEEDER_RULE = (f"a task is speeding when its seconds per question is below {MIN_PLAUSIBLE_SECONDS_PER_QUESTION:g} "
                "(annotations.selectors.cost.MIN_PLAUSIBLE_SECONDS_PER_QUESTION, faster than a person reads a question "
                f"and its explanation); seconds per question is {SECONDS_PER_QUESTION_RULE}, the figure the review "
                "page gives each worker, here per task. A task with no timed question is never speeding; speeding "
                "tasks count in the published figures")
FLAG_RULE = (f"{ACCEPTED_FLAG_SCOPE}. The answers of the units an accepted flag concerns count in the published "
             "figures")
# Blocked workers (``annotations.selectors.worker_blocked_in``): a block refuses the worker new tasks
# and ends those in progress (``annotations.services.platforms.blocks.worker_block``), but their
# submitted and approved work stays counted until a researcher rejects it.
BLOCKED_WORKER_RULE = ("a counted task's worker is blocked in this study when a block covers it (made on this study, "
                       "by its owner, or everywhere: annotations.selectors.blocks_covering); a block ends the worker's "
                       "tasks in progress and refuses them new ones, but their submitted and approved tasks count in "
                       "the published figures until a researcher rejects them")
# A copy imported from a study bundle (``bundle.importing``) holds the blocks its bundle carried
# (data/worker_blocks.csv, made here as blocks on the copy); its import record's summary says how
# many (``WORKER_BLOCKS_KEY``), or why none are known (``WORKER_BLOCKS_UNKNOWN_KEY``).
WORKER_BLOCKS_KEY = "worker_blocks"
WORKER_BLOCKS_UNKNOWN_KEY = "worker_blocks_unknown"
WORKER_BLOCKS_IMPORTED_BEFORE = ("the study was imported from a study bundle before imports carried the blocks of "
                                 "its workers (data/worker_blocks.csv)")


def worker_blocks_unknown(study: Study) -> str:
    """Why it is not known here which of ``study``'s workers were blocked where it was first run
    ('' when it is, or ``study`` is no copy of a study bundle): its bundle, or its import, did not
    carry the blocks, so ``BLOCKED_WORKER_RULE`` sees only the blocks made here. Read from the
    copy's bundle import record (``scoring.selectors.bundle_import_record``); the bundle export
    leaves the table out of a copy's bundle then, so a copy of the copy says so too."""
    record = bundle_import_record(study=study)
    summary = record.summary if record is not None else None
    if not isinstance(summary, dict) or isinstance(summary.get(WORKER_BLOCKS_KEY), int):
        return ""
    return str(summary.get(WORKER_BLOCKS_UNKNOWN_KEY) or WORKER_BLOCKS_IMPORTED_BEFORE)


READING_RULES = {
    "without_tasks_failing_any_check": f"the counted answers less those of tasks that failed an attention check; "
                                       f"{FAILED_ANY}",
    "without_tasks_failing_every_check": f"the counted answers less those of tasks that failed an attention check; "
                                         f"{FAILED_EVERY}",
    "approved_tasks_only": "the counted answers of approved tasks only (submitted tasks not yet reviewed left out)",
    "without_units_with_accepted_flags": "the counted answers less every answer of the units an accepted flag "
                                         f"concerns; {ACCEPTED_FLAG_SCOPE}",
    "without_speeding_tasks": f"the counted answers less those of speeding tasks; {SPEEDER_RULE}",
    "without_blocked_workers": f"the counted answers less those of tasks whose worker is blocked in this study; "
                               f"{BLOCKED_WORKER_RULE}",
}


def _reading_masks(study: Study, answers: pd.DataFrame, suspects: _Suspects
                   ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Which of the counted ``answers`` (the rows of ``_annotation_frame``) each other reading keeps
    (``READING_RULES``), from their task's status, attention checks and pace, the flags a
    researcher accepted on their unit's question or explanation, and whether their worker is
    blocked in the study."""
    counted = claims_that_count(study=study)
    tasks = pd.DataFrame.from_records(list(counted.values_list("id", "assignment_id", "assignment__status")),
                                      columns=["claim_id", "assignment_id", "status"])
    checks = pd.DataFrame.from_records(list(
        Annotation.objects.filter(step=Annotation.Step.ATTENTION, claim__assignment_id__in=counted.values("assignment_id"))
        .values("claim__assignment_id").order_by()
        .annotate(n=Count("id"), wrong=Count("id", filter=Q(payload__correct=False)))
        .values_list("claim__assignment_id", "n", "wrong")), columns=["assignment_id", "n_checks", "n_wrong"])
    tasks = tasks.merge(checks, on="assignment_id", how="left").fillna({"n_checks": 0, "n_wrong": 0})
    rows = answers[["claim_id"]].merge(tasks, on="claim_id", how="left")
    masks = {
        "without_tasks_failing_any_check": (rows["n_wrong"] == 0).to_numpy(),
        "without_tasks_failing_every_check": ~((rows["n_checks"] > 0) & (rows["n_wrong"] == rows["n_checks"])).to_numpy(),
        "approved_tasks_only": (rows["status"] == Assignment.Status.APPROVED).to_numpy(),
        "without_units_with_accepted_flags": ~answers["unit_id"].isin(suspects.flagged_units).to_numpy(),
        "without_speeding_tasks": ~rows["assignment_id"].isin(suspects.speeding_tasks).to_numpy(),
        "without_blocked_workers": ~rows["assignment_id"].isin(suspects.blocked_tasks).to_numpy(),
    }
    return masks, READING_RULES


@dataclass(frozen=True)
class _Suspects:
    """The counted work the published figures keep but a reader may want without (read once per
    run, ``_suspect_work``): the units an accepted flag concerns (``ACCEPTED_FLAG_SCOPE``), the
    counted tasks that are speeding (``SPEEDER_RULE``), how many counted tasks have no timed
    question, and the counted tasks whose worker is blocked in the study (``BLOCKED_WORKER_RULE``)."""

    flagged_units: list[int]
    speeding_tasks: set[int]
    untimed_tasks: int
    blocked_tasks: set[int]


def _suspect_work(study: Study) -> _Suspects:
    tasks = Assignment.objects.filter(pk__in=claims_that_count(study=study).values("assignment_id"))
    pace = task_seconds_per_question(tasks=tasks)
    return _Suspects(
        flagged_units=list(units_with_accepted_flags(study=study).values_list("pk", flat=True)),
        speeding_tasks={task for task, seconds in pace.items() if seconds < MIN_PLAUSIBLE_SECONDS_PER_QUESTION},
        untimed_tasks=tasks.count() - len(pace),
        blocked_tasks=set(tasks.filter(worker_blocked_in(study=study)).values_list("pk", flat=True)))


def _flags_and_speed(study: Study, counted, suspects: _Suspects, readings_at: dict[str, str] | None = None
                     ) -> tuple[dict, list[str]]:
    """What ``counted_answers`` says of accepted flags, speeding tasks and the tasks of blocked
    workers (the published figures count all three), with a warning for each found. A warning
    points to the figures without them only where the run has that reading (``readings_at``: each
    reading's place in the results; a rationale-properties study has none)."""
    units, speeding, untimed = suspects.flagged_units, suspects.speeding_tasks, suspects.untimed_tasks
    blocked = suspects.blocked_tasks
    flagged = counted.filter(unit_id__in=units)
    slow = counted.filter(assignment_id__in=speeding)
    block = {"accepted_flag_rule": FLAG_RULE,
             "flags_accepted": study_accepted_flags(study=study).count(),
             "units_with_accepted_flags": len(units),
             "answers_in_units_with_accepted_flags": _claim_answers(flagged) if units else 0,
             "speeder_rule": SPEEDER_RULE,
             "speeder_threshold_seconds_per_question": MIN_PLAUSIBLE_SECONDS_PER_QUESTION,
             "tasks_speeding": len(speeding),
             "answers_speeding": _claim_answers(slow) if speeding else 0,
             "tasks_untimed": untimed,
             "blocked_worker_rule": BLOCKED_WORKER_RULE,
             "tasks_of_blocked_workers": len(blocked),
             "answers_of_blocked_workers": _claim_answers(counted.filter(assignment_id__in=blocked)) if blocked else 0}
    if unknown := worker_blocks_unknown(study):
        block["blocked_workers_not_carried"] = unknown

    readings_at = readings_at or {}

    def without(name: str) -> str:
        return f" ({readings_at[name]} gives the figures without them)" if name in readings_at else ""

    warnings = []
    if block["answers_in_units_with_accepted_flags"]:
        warnings.append(
            f"{block['answers_in_units_with_accepted_flags']} counted answers are in {len(units)} units whose question "
            "or explanation a researcher accepted a flag on; they count in the figures"
            f"{without('without_units_with_accepted_flags')}.")
    if speeding:
        warnings.append(
            f"{len(speeding)} counted tasks ({block['answers_speeding']} answers) took under "
            f"{MIN_PLAUSIBLE_SECONDS_PER_QUESTION:g} seconds a question (median), faster than a person reads; they count "
            f"in the figures{without('without_speeding_tasks')}.")
    if blocked:
        other = readings_at.get("without_blocked_workers")
        warnings.append(
            f"{len(blocked)} counted tasks ({block['answers_of_blocked_workers']} answers) are of workers blocked in "
            "this study; a block ends only their tasks in progress, so these count in the figures. Reject the work "
            "if it should not count" + (f", or read {other} for the figures without it." if other else "."))
    if unknown:
        warnings.append(f"Which workers were blocked where this study was first run is not known here: {unknown}; "
                        "tasks_of_blocked_workers counts only the blocks made here.")
    return block, warnings


def _claim_answers(claims) -> int:
    """The answers given to ``claims`` (every step)."""
    return Annotation.objects.filter(claim__in=claims).count()


def _task_answers(tasks) -> int:
    """The answers given in ``tasks`` to the study's questions (every step; attention checks aside)."""
    return Annotation.objects.filter(claim__assignment__in=tasks, claim__unit__isnull=False).count()


def _counted_answers(study: Study, *, readings: dict | None = None, suspects: _Suspects | None = None,
                     readings_at: dict[str, str] | None = None) -> Part:
    """Which tasks the counted answers come from: approved ones, and submitted ones nobody has
    reviewed yet, which count until they are rejected (among them those that failed an attention
    check). Scoring before the review gives other figures than after it: the results say which.
    Also the work left out: submitted or approved tasks on hold (``assignments_on_hold``: sync found
    another worker on the platform, or the platform does not list them, and no researcher has
    cleared them; they count once cleared) and
    rejected tasks, each with its answers. ``suspects``: the run's flagged units, speeding tasks and
    tasks of blocked workers (``_suspect_work``, read here when not given). ``readings``: the other
    readings, stored here as ``other_readings``; ``readings_at``: where the run keeps its other readings
    when they are elsewhere (a question-validation study's, ``question_validation.other_readings``).
    The warnings point to a reading only where the run has it."""
    counted = claims_that_count(study=study)
    tasks = dict(counted.order_by().values("assignment__status").annotate(n=Count("assignment_id", distinct=True))
                 .values_list("assignment__status", "n"))
    failing = (Annotation.objects.filter(step=Annotation.Step.ATTENTION, payload__correct=False,
                                         claim__assignment_id__in=counted.values("assignment_id"))
               .values("claim__assignment_id").distinct().count())
    unreviewed = int(tasks.get(Assignment.Status.SUBMITTED, 0))
    held = assignments_on_hold(study=study).filter(status__in=COUNTING_ASSIGNMENT_STATUSES)
    rejected = Assignment.objects.filter(study=study, status=Assignment.Status.REJECTED)
    n_held = held.count()
    block = {"rule": COUNTED, "tasks_approved": int(tasks.get(Assignment.Status.APPROVED, 0)),
             "tasks_not_reviewed": unreviewed, "tasks_failing_an_attention_check": failing,
             "tasks_on_hold": n_held, "answers_on_hold": _task_answers(held) if n_held else 0,
             "hold_rule": hold_rule(), "expiry_rule": expiry_rule(study),
             "tasks_rejected": (n_rejected := rejected.count()),
             "answers_rejected": _task_answers(rejected) if n_rejected else 0,
             "attention_check_rule": FAILED_ANY}
    for status in (Assignment.Status.RETURNED, Assignment.Status.EXPIRED):
        # tasks given back or run out after answering some questions: their completed answers are left out
        ended = Assignment.objects.filter(study=study, status=status, claims__unit__isnull=False,
                                          claims__completed_at__isnull=False).distinct()
        n_ended = ended.count()
        block[f"tasks_{status}_with_completed_answers"] = n_ended
        block[f"answers_{status}"] = (Annotation.objects.filter(
            claim__assignment__in=ended, claim__unit__isnull=False, claim__completed_at__isnull=False).count()
            if n_ended else 0)
    if n_held:
        block["tasks_on_hold_by_reason"] = dict(
            PlatformSubmission.objects.filter(assignment__in=held.values("pk"), flag__in=HOLDING_FLAGS,
                                              cleared_at__isnull=True)
            .order_by("flag").values("flag").annotate(n=Count("assignment_id", distinct=True)).values_list("flag", "n"))
    where = {**(readings_at or {}), **{name: f"counted_answers.other_readings.{name}" for name in readings or {}}}
    flags_and_speed, flag_speed_warnings = _flags_and_speed(study, counted, suspects or _suspect_work(study), where)
    block.update(flags_and_speed)
    if readings is not None:
        block["other_readings"] = readings
    warnings = []
    if n_held:
        warnings.append(
            f"{n_held} submitted tasks ({block['answers_on_hold']} answers) are on hold and not counted: sync found the "
            "platform's worker is not the participant who answered, or the platform does not list the work. Held work counts once a researcher clears it, "
            "so figures scored after that may differ.")
    if unreviewed:
        warnings.append(
            f"{unreviewed} of the tasks counted here are submitted but not yet reviewed"
            + (f" ({failing} counted tasks failed an attention check)" if failing else "")
            + ": they count until rejected, so figures scored after the review may differ.")
    elif failing:
        warnings.append(f"{failing} approved tasks counted here failed an attention check.")
    warnings.extend(flag_speed_warnings)
    return Part({"counted_answers": block}, warnings)


def _withdrawals(study: Study) -> Part:
    """Participants who withdrew: their answers are erased, so say how many the figures lack."""
    withdrawn = study_withdrawals_summary(study=study)
    if not withdrawn.participants:
        return Part({})
    return Part({"withdrawals": withdrawn.as_dict()}, [withdrawn.note])


def study_score(
    *,
    study: Study,
    run: ScoreRun | None = None,
    both_directions: bool = False,
    similarity: bool | None = None,
) -> ScoreRun:
    """Score ``study`` and return the finished ``ScoreRun`` (status done, or failed with the
    reason in ``error``). Rewrites the study's ``UnitScore`` rows. ``run`` is the run to fill (the
    task's, already running; a pending or failed one is started); without it a new one is created.
    ``similarity`` (BERTScore against the gold
    rationale) defaults to the setting ``RL_SCORING_SIMILARITY`` (on unless set false); the results
    say which chose it (``similarity_requested``: {value, from: "caller" | "RL_SCORING_SIMILARITY"}).

    Everything is read and computed first, outside any transaction (BERTScore and the mixed model
    can take minutes); one short transaction then stores the unit scores and finishes the run.

    Inside that transaction the study's row is locked first, and a run of the study asked for after
    this one that is already done refuses it (``runs.score_run_store_lock``: superseded), so an
    older, slower run never overwrites a newer run's unit scores nor becomes the latest; then the
    run's requester is checked again (``runs.score_run_requester_check``: a share revoked while it
    computed). Refused either way, nothing is stored and the run fails with why. So too for imported
    outcomes imported again while it computed (``selectors.outcomes_changed_since`` after ``read_at``,
    or rows no longer those it read: ``_store_unit_scores``): its figures count outcomes that are
    gone, so it fails naming that import and the study is scored again.

    A ``ScoringError`` (nothing to score, the requester refused) marks the run failed with its
    message; any other error marks it failed and propagates. A collected utility or generalization
    study with no unit to score (``NothingScored``: e.g. every answer withdrawn) fails so too, but first removes,
    under the same lock and checks, the unit-score rows of the units it no longer scores
    (``_remove_unscored_unit_scores``, the store's own removal: all of them)."""
    similarity_from = SIMILARITY_FROM_CALLER if similarity is not None else SIMILARITY_FROM_SETTING
    if similarity is None:
        similarity = bool(settings.RL_SCORING_SIMILARITY)
    study = Study.objects.select_related("dataset").get(pk=study.pk)  # never score a stale copy
    if run is None:
        run = ScoreRun.objects.create(study=study, status=ScoreRun.Status.RUNNING, attempts=1, by_operator=True)
    elif run.status != ScoreRun.Status.RUNNING:
        ScoreRun.STATUS.move(run, ScoreRun.Status.RUNNING, error="", attempts=run.attempts + 1)
    try:
        try:
            # Taken before any answer is read: work that changes after it may be missing from the run
            # (``bundle.export.scores_staleness`` compares a study's changes with it, not finished_at).
            read_at = timezone.now()
            results, frame = _compute(study, both_directions=both_directions, similarity=similarity, run=run,
                                      similarity_from=similarity_from)
        except NothingScored:
            # Nothing to score: the rows of the units it no longer scores go all the same, under the
            # lock and checks the store takes (a superseded or refused run removes nothing); it fails.
            with transaction.atomic():
                score_run_store_lock(run)
                score_run_requester_check(run)
                _remove_unscored_unit_scores(study, run=run)
            raise
        if frame is not None:
            score_stage("storing the unit scores")
        with transaction.atomic():
            # The study's row locked; a run asked for after this one and already done: refused,
            # nothing is written (the latest run is the last asked for, and its unit scores stay).
            score_run_store_lock(run)
            # Its requester may have lost the right while it computed: refused, nothing is written.
            score_run_requester_check(run)
            # Imported outcomes imported again while it computed: its figures count the rows it read,
            # which that import changed or removed; refused, nothing is written (score again).
            reimported = outcomes_changed_since(study=study, since=read_at) if study.is_imported_outcome else None
            if reimported is not None:
                raise ScoringError(
                    f"Study {study.name!r}: outcomes were imported again while this run computed "
                    f"({reimported.filename} at {reimported.imported_at.isoformat()}): score the study again. "
                    "This run stored nothing.")
            if frame is not None:
                _store_unit_scores(study, frame, run=run)
            finished_at = timezone.now()
            results["run"]["finished_at"] = finished_at.isoformat()
            results["run"]["read_at"] = read_at.isoformat()
            ScoreRun.STATUS.move(run, ScoreRun.Status.DONE, results=results, warnings=results["warnings"],
                                 finished_at=finished_at)
    except ScoringError as exc:
        run.refresh_from_db(fields=["status"])  # what a rolled-back transaction left
        ScoreRun.STATUS.move(run, ScoreRun.Status.FAILED, error=str(exc), finished_at=timezone.now())
    except Exception as exc:
        logger.exception("scoring of study %s failed", study.pk)
        run.refresh_from_db(fields=["status"])
        error = f"Internal error while scoring: {exc.__class__.__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        ScoreRun.STATUS.move(run, ScoreRun.Status.FAILED, error=error, finished_at=timezone.now())
        raise
    return run
