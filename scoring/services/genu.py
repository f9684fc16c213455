"""Gen-U in a study's results: read the answerers' predictions of the study's items, compute
Gen-U per (item, source) with the one definition (:mod:`studies.lm.genu`) and state what it was
computed on (SPEC section 4)."""
from __future__ import annotations

import json

import pandas as pd
from django.db.models import BooleanField, ExpressionWrapper, Q

from scoring.metrics import pipeline
from scoring.metrics.pipeline import Part, bundle_consistency
from studies.lm import genu as genu_rule
from studies.models import GeneralizationQuestion, GenerationJob, GenUPrediction, Rationale, RationaleSource
from studies.selectors import QUESTION_RULE, questions_that_count, sources_for_owner
from studies.services.generation.genu import (
    ANSWERING_KEY,
    INPUT_TRAINING,
    QUESTION_CHANGED,
    RATIONALE_CHANGED,
    ROLES,
    VALIDATED_ONLY_READING,
    AnswererCheckpoints,
    checkpoint_replaced,
    inputs_changed,
    inputs_recorded,
)
from studies.services.importers.generalization import CONFLICTING_ANSWERS_KEY

# What a bundle of the answerers' consistency (``gen_u["consistency"]``) is. SPEC section 5's bundle is
# "an item with all its generalization questions", but F^I and F^IR answer only the generalization
# questions (``GenUPrediction``), never the item itself, so that bundle cannot be formed here. Each
# answerer's consistency rests on its own predictions: another answerer's output that did not parse
# (which leaves the question out of Gen-U's mode) removes nothing from it. A bundle is every question
# of the item that counts now for the source (``_questions_counting_now``, as ``questions_answered``
# counts them), answered or not.
CONSISTENCY_BUNDLE = ("an item's generalization questions that count now for Gen-U, per source, answered by F^I "
                      "(without the rationale) or F^IR (with it), each answerer over its own predictions (one "
                      "answerer's output that did not parse removes no question from the other's); the item itself "
                      "is left out: the answerers do not answer it, so SPEC section 5's bundle (the item with all its "
                      "generalization questions) cannot be formed. A bundle is every question of the item that counts "
                      "now, so one with a question the answerer has no prediction of (its Gen-U job ran before the "
                      "question was validated or added) or whose output did not parse is incomplete: left out and "
                      "counted (n_bundles_incomplete), as a human bundle with an unanswered member is; the other "
                      "reading, each such question counted as wrong and its bundle as not consistent at its full "
                      "size, is gen_u.consistency_incomplete_rules' counted_not_consistent")

# How a bundle with a member that is not answered counts in consistency, the names shared by the
# human answers' consistency (``scoring.services.score``: a question with no completed answers yet)
# and the Gen-U answerers' (a question with no prediction, or whose output did not parse). SPEC
# section 5 calls a bundle consistent when every instance in it is answered correctly and leaves
# unanswered instances open; the published figures leave such a bundle out and count it.
BUNDLE_INCOMPLETE_LEFT_OUT = "left_out"
BUNDLE_INCOMPLETE_NOT_CONSISTENT = "counted_not_consistent"
BUNDLE_INCOMPLETE_SPEC = ("SPEC section 5: a bundle is consistent when every instance in it is answered correctly; it "
                          "does not say how a bundle counts whose instances are not all answered")

# The two readings of an incomplete bundle in the answerers' consistency
# (``gen_u["consistency_incomplete_rules"]``); the default's figures are ``gen_u["consistency"]``.
CONSISTENCY_INCOMPLETE_RULES = {
    BUNDLE_INCOMPLETE_LEFT_OUT: "a bundle with a question that counts but that the answerer has no prediction of, or "
                                "whose output did not parse (an incomplete bundle), is left out of the answerer's "
                                "consistency and counted (n_bundles_incomplete), as a human bundle with an unanswered "
                                "member is (gen_u.consistency; our reading, SPEC leaves unanswered instances open)",
    BUNDLE_INCOMPLETE_NOT_CONSISTENT: "an incomplete bundle counts as not consistent: its questions with no prediction "
                                      "or an output that did not parse count as wrong answers, every bundle at its "
                                      "full size",
}
CONSISTENCY_INCOMPLETE_SPEC = (f"{BUNDLE_INCOMPLETE_SPEC}; nor how an LM output that did not parse counts (section 8 "
                               "says only that parse failures are recorded with the raw output, never dropped "
                               "silently)")


# What the paper (SPEC) says of an LM output that did not parse: nothing on how it counts in a figure
# (section 8 says only that parse failures are recorded with the raw output, never dropped silently).
# Task accuracy (``score.task_accuracy_readings``) and Gen-U (``unparsed_rules`` below) keep leaving
# such outputs out by default, and each gives the figure with them counted as wrong beside it.
UNPARSED_SPEC = ("SPEC does not say how an LM output that did not parse counts (section 8 says only that parse "
                 "failures are recorded with the raw output, never dropped silently)")

# The two readings of a Gen-U answer that did not parse (``gen_u["unparsed_rules"]``).
UNPARSED_LEFT_OUT = "left_out"
UNPARSED_COUNTED_WRONG = "counted_wrong"
UNPARSED_RULES = {
    UNPARSED_LEFT_OUT: "a question whose F^I or F^IR answer did not parse is left out of the item's mode (the "
                       "published figures; studies.lm.genu)",
    UNPARSED_COUNTED_WRONG: "an F^I or F^IR answer that did not parse counts as a wrong answer in the question's "
                            "score (SPEC section 4: s = -1 when F^IR's did not parse, else +1 when F^I's did not); "
                            "a question with only one answerer's prediction is still left out",
}


# A generalization question its file gave twice with different answers keeps the first answer
# (``studies.services.importers.generalization``, which flags it: ``CONFLICTING_ANSWERS_KEY``), and an
# import's validation status marks it valid with the rest. SPEC says nothing of it, so the figures keep
# it by default and Gen-U (``gen_u["conflicting_answers"]``) and Figure 4 (``generalization``'s) give
# the figures with such questions left out beside it.
CONFLICTING_FIRST_KEPT = "first_kept"
CONFLICTING_LEFT_OUT = "left_out"
CONFLICTING_RULES = {
    CONFLICTING_FIRST_KEPT: "a question its file gave twice with different answers keeps the first answer in the "
                            "file and counts (the published figures); our choice, SPEC is silent",
    CONFLICTING_LEFT_OUT: "a question its file gave twice with different answers is left out",
}
CONFLICTING_SPEC = "SPEC is silent on a generalization question its file gives twice with different answers"


def question_conflicted(path: str = "") -> ExpressionWrapper:
    """Whether the generalization question that ``path`` leads to had conflicting answers in its
    file (the importer's flag), as a boolean to annotate with."""
    return ExpressionWrapper(Q(**{f"{path}metadata__has_key": CONFLICTING_ANSWERS_KEY}), output_field=BooleanField())


def conflicting_block(n_questions: int) -> dict:
    """The rule, its other reading and what SPEC says, with the count of questions it concerns."""
    return {"default": CONFLICTING_FIRST_KEPT, "rules": dict(CONFLICTING_RULES), "spec": CONFLICTING_SPEC,
            "n_questions_conflicting_answers": int(n_questions)}


# Which generalization questions a published figure counts: every question not marked invalid when
# scored (``studies.selectors.QUESTION_RULE``), validated or not. Figure 4 counts each such question
# of the study's units; Gen-U each such question its answerers answered, and a Gen-U job answers the
# unvalidated ones only when told to (its default is ``VALIDATED_ONLY_READING``). SPEC section 4 says
# humans validate the questions, not which ones the figures count, so where unvalidated questions
# count the figures on validated questions only are given beside them (``gen_u["unvalidated_questions"]``,
# ``generalization["unvalidated_questions"]``), keyed like ``CONFLICTING_RULES``' readings.
QUESTIONS_NOT_INVALID = "not_invalid"
QUESTIONS_VALIDATED_ONLY = "validated_only"
QUESTION_READINGS = {
    QUESTIONS_NOT_INVALID: f"{QUESTION_RULE}: the published figures",
    QUESTIONS_VALIDATED_ONLY: f"{VALIDATED_ONLY_READING}: the questions nobody validated left out",
}
QUESTION_READINGS_SPEC = ("SPEC section 4 says humans validate the generalization questions and their answers; it "
                          "does not say which questions the figures count")


def unvalidated_block(n_questions: int) -> dict:
    """The question readings, what SPEC says and the count of unvalidated questions they differ on."""
    return {"default": QUESTIONS_NOT_INVALID, "rules": dict(QUESTION_READINGS), "spec": QUESTION_READINGS_SPEC,
            "n_questions_unvalidated": int(n_questions)}


def question_filter(validation: pd.Series, *, what: str, unvalidated_why: str, counted: str = "",
                    other_reading: str = "") -> tuple[dict, list[str]]:
    """What a figure's counted questions are (``validation``: the status of each counted question,
    one row per question): ``n_questions_validated``, ``n_questions_unvalidated`` and
    ``question_filter`` in words (``unvalidated_why``: why unvalidated ones are in), with a
    warning naming ``what`` when unvalidated questions count: ``counted`` says which reading the
    published figures use (by default that validated questions only is the default, which is true
    of a Gen-U job's answers), ``other_reading`` where the figures without them are."""
    validated = int((validation == GeneralizationQuestion.Validation.VALID).sum())
    unvalidated = int(len(validation) - validated)
    block = {"n_questions_validated": validated, "n_questions_unvalidated": unvalidated}
    warnings = []
    if unvalidated:
        block["question_filter"] = f"includes unvalidated questions ({unvalidated_why})"
        warnings.append(f"{what} includes {unvalidated} generalization questions nobody validated "
                        f"({counted or f'the default is {VALIDATED_ONLY_READING}'})"
                        + (f"; {other_reading}" if other_reading else "") + ".")
    else:
        block["question_filter"] = "validated questions only"
    return block, warnings


def _gen_u_predictions(item_ids, source_names: dict[int, str]) -> pd.DataFrame:
    """Gen-U predictions of these items and sources, on the questions that count
    (``studies.selectors.questions_that_count``). A blank predicted answer is an output that did not parse."""
    rows = GenUPrediction.objects.filter(
        questions_that_count("generalization_question__"),
        generalization_question__item_id__in=list(item_ids), rationale_source_id__in=list(source_names)
    ).annotate(conflicted=question_conflicted("generalization_question__")).values_list(
        "generalization_question_id", "generalization_question__item_id", "rationale_source_id", "answerer", "correct",
        "predicted_answer", "generalization_question__validation_status", "answerer_model", "answerer_source_id",
        "conflicted", "generalization_question__text", "inputs")
    df = pd.DataFrame.from_records(list(rows), columns=[
        "question_id", "item_id", "source_id", "answerer", "correct", "predicted", "validation", "answerer_model",
        "answerer_source_id", "conflicted", "question_text", "inputs"])
    df["conflicted"] = df["conflicted"].fillna(False).astype(bool)
    df["unvalidated"] = df["validation"] != GeneralizationQuestion.Validation.VALID
    df["source"] = df["source_id"].map(source_names)
    df["parsed"] = df["predicted"].fillna("").astype(str) != ""
    return _inputs_states(df)


# Which Gen-U predictions the figures leave out because what their answerer was given is not the
# question or rationale as they are now (counted per source in ``gen_u.inputs``), and which they keep.
INPUTS_LEFT_OUT_RULE = (
    "a Gen-U prediction is left out when the question it answered (its text, as its prompt showed it) or, for F^IR, the "
    "rationale it was shown, recorded with it by the Gen-U job, differs from the question or rationale now (edited "
    "or re-imported since): question_changed, rationale_changed; rerun the Gen-U job to answer them again. "
    "Predictions stored before their inputs were recorded (or imported from a bundle made before bundles carried them) are kept and counted "
    "(inputs_not_recorded): nothing says what they were answered on. Predictions whose answerer's checkpoint was "
    "replaced since are kept, named by the training they recorded, and counted (checkpoint_replaced)")


def _inputs_states(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (:func:`_gen_u_predictions`' rows) with, per prediction, whether it records its inputs
    (``inputs_recorded``), whether its question or (F^IR) rationale changed since
    (``question_changed``, ``rationale_changed``: ``studies.services.generation.genu.inputs_changed``),
    whether its answerer's checkpoint was replaced since (``checkpoint_replaced``) and then the
    training record it recorded, as JSON text (``training_recorded``; None otherwise)."""
    pairs = {(int(i), int(s)) for i, s in zip(df["item_id"], df["source_id"], strict=True)}
    rationales = {(item_id, source_id): text for item_id, source_id, text in Rationale.objects.filter(
        item_id__in={i for i, _ in pairs}, source_id__in={s for _, s in pairs}).values_list(
        "item_id", "source_id", "text") if (item_id, source_id) in pairs}
    checkpoints = AnswererCheckpoints()
    states = []
    for row in df.itertuples(index=False):
        inputs = row.inputs
        recorded = inputs_recorded(inputs)
        changed = inputs_changed(inputs, question_text=row.question_text,
                                 rationale=rationales.get((int(row.item_id), int(row.source_id)))
                                 if row.answerer == "IR" else None)
        answerer_id = None if pd.isna(row.answerer_source_id) else int(row.answerer_source_id)
        replaced = False
        if recorded and answerer_id is not None:
            now = checkpoints.now(answerer_id)
            replaced = now is not None and checkpoint_replaced(inputs, checkpoint_now=now, answerer_id=answerer_id)
        training = (json.dumps(inputs.get(INPUT_TRAINING) or {}, sort_keys=True)
                    if replaced and isinstance(inputs.get(INPUT_TRAINING), dict) else None)
        states.append((recorded, QUESTION_CHANGED in changed, RATIONALE_CHANGED in changed, replaced, training))
    out = pd.DataFrame.from_records(states, index=df.index, columns=[
        "inputs_recorded", "question_changed", "rationale_changed", "checkpoint_replaced", "training_recorded"])
    for column in ("inputs_recorded", "question_changed", "rationale_changed", "checkpoint_replaced"):
        out[column] = out[column].astype(bool) if len(out) else pd.Series(dtype=bool)
    return pd.concat([df.drop(columns=["inputs", "question_text"]), out], axis=1)


def _inputs_left_out(preds: pd.DataFrame) -> tuple[pd.DataFrame, dict, list[str]]:
    """The predictions the figures count (those whose question and rationale are as they were
    answered on, :data:`INPUTS_LEFT_OUT_RULE`), the ``gen_u.inputs`` block (the rule and, per source,
    ``n_predictions``, ``n_left_out``, ``question_changed``, ``rationale_changed``,
    ``inputs_not_recorded`` and ``checkpoint_replaced``) and a warning per source with some left out,
    kept unrecorded or answered by a replaced checkpoint."""
    stale = preds["question_changed"] | preds["rationale_changed"]
    by_source: dict = {}
    warnings = []
    for source, g in preds.groupby("source", sort=True):
        g_stale = g["question_changed"] | g["rationale_changed"]
        entry = {"n_predictions": int(len(g)), "n_left_out": int(g_stale.sum()),
                 QUESTION_CHANGED: int(g["question_changed"].sum()), RATIONALE_CHANGED: int(g["rationale_changed"].sum()),
                 "inputs_not_recorded": int((~g["inputs_recorded"]).sum()),
                 "checkpoint_replaced": int((g["checkpoint_replaced"] & ~g_stale).sum())}
        by_source[str(source)] = entry
        if entry["n_left_out"]:
            why = " and ".join(what for what, n in (("the question", entry[QUESTION_CHANGED]),
                                                     ("the rationale (F^IR)", entry[RATIONALE_CHANGED])) if n)
            warnings.append(f"Gen-U of {source}: {entry['n_left_out']} of its {entry['n_predictions']} Gen-U "
                            f"predictions are left out: {why} they were answered on changed since (edited or "
                            "re-imported; gen_u.inputs): rerun its Gen-U job to answer them again.")
        if entry["inputs_not_recorded"]:
            warnings.append(f"Gen-U of {source}: {entry['inputs_not_recorded']} of its Gen-U predictions do not record "
                            "the question and rationale they were answered on (stored before they were recorded, or "
                            "imported): they are taken to answer the questions and rationales as they are now.")
    return preds.loc[~stale], {"rule": INPUTS_LEFT_OUT_RULE, "by_source": by_source}, warnings


def answerer_sources_readable(reader):
    """The sources whose fine-tuning settings a study read by ``reader`` (its owner; None: the
    operator's study) may name for its Gen-U answerers: those the reader's membership covers
    (``sources_for_owner``: whether or not the owner's account is active, so that deactivating the
    owner does not change the results), so another researcher's training settings never enter a report."""
    return RationaleSource.objects.all() if reader is None else sources_for_owner(user=reader)


# How an answerer's settings were found (``gen_u["answerers"][role][i]["matched_by"]``).
BY_ANSWERER_SOURCE = "answerer source"
BY_MODEL_PATH = "model path"


def _answerer_keys(group: pd.DataFrame) -> list[tuple[str, int | None, str | None]]:
    """The distinct (model path, answerer source id or None, training record recorded by predictions
    whose answerer's checkpoint was replaced since, as JSON text, or None) of one answerer's predictions."""
    keys = {(str(model), None if pd.isna(source_id) else int(source_id), training if isinstance(training, str) else None)
            for model, source_id, training in zip(group["answerer_model"], group["answerer_source_id"],
                                                  group["training_recorded"], strict=True)}
    return sorted(keys, key=lambda k: (k[0], k[1] is None, k[1] or 0, k[2] is not None, k[2] or ""))


# What an answerer entry says where its Gen-U job did not record how it answered (jobs run before
# the record, imported predictions, a source matched by model path or not readable).
NOT_RECORDED = "not recorded"
# How each fine-tuning setting the paper may state is named in the report (``training["from_paper"]``).
FROM_PAPER_NAMES = {"base_model_in_paper": "the base model", "n_shot": "the number of training examples",
                    "epochs": "the epochs"}


def answering_recorded(*, role_code: str, answerer_id: int, source_ids) -> list[dict]:
    """The distinct settings (backend, template, decoding) that the Gen-U jobs of ``source_ids``
    with ``answerer_id`` as ``role_code`` ("I" or "IR") recorded answering with (the job's
    ``params["answering"]``, :func:`studies.services.generation.genu.answerer_settings`); empty when
    none recorded them."""
    key = ROLES.get(role_code)
    if key is None:
        return []
    jobs = GenerationJob.objects.filter(kind=GenerationJob.Kind.GENU_ANSWERS, source_id__in=list(source_ids),
                                        **{f"params__{key}": answerer_id}).order_by("pk")
    found: list[dict] = []
    for params in jobs.values_list("params", flat=True):
        for entry in ((params or {}).get(ANSWERING_KEY) or {}).get(role_code) or []:
            if entry not in found:
                found.append(entry)
    return found


def _answering_fields(recorded: list[dict]) -> dict:
    """An answerer entry's ``backend``, ``template`` (with ``template_origin``) and ``decoding``:
    the one recorded, a list where the jobs recorded several, ``NOT_RECORDED`` where none did."""
    out = {}
    for name in ("backend", "template", "template_origin", "decoding"):
        values = []
        for entry in recorded:
            if entry.get(name) not in values:
                values.append(entry.get(name))
        out[name] = NOT_RECORDED if not values else values[0] if len(values) == 1 else values
    out["answering"] = recorded
    return out


def _gen_u_method(preds: pd.DataFrame, results_gen_u: dict, warnings: list[str], *, reader) -> None:
    """What the Gen-U figures were computed on: the question filter, the tie rule and the
    answerers with their fine-tuning settings. A prediction that records the source that answered
    it (``answerer_source``) reads that source's settings; one that does not (written before it was
    recorded, imported from a bundle, or its source deleted) falls back to the newest fine-tuned
    source with the answerer's model path (``matched_by`` "model path", which the report states).
    Either way only among the sources ``reader`` may read (``answerer_sources_readable``; another's
    reads as "training not recorded")."""
    questions = preds.drop_duplicates("question_id")
    block, question_warnings = question_filter(
        questions["validation"], what="Gen-U", unvalidated_why="chosen explicitly when answering",
        counted=f"the published Gen-U counts every question not marked invalid that its answerers answered, and a "
                f"Gen-U job answers unvalidated ones only when told to: its default is {VALIDATED_ONLY_READING}",
        other_reading="gen_u.unvalidated_questions gives the figures on validated questions only")
    results_gen_u.update(block)
    warnings.extend(question_warnings)
    results_gen_u["tie_rule"] = genu_rule.TIE_RULE_TEXT
    readable = answerer_sources_readable(reader)
    rationale_sources = {int(s) for s in preds["source_id"].unique()}
    answerers: dict[str, list] = {}
    for code, group in preds.groupby("answerer"):
        entries = []
        for model, source_id, replaced in _answerer_keys(group):
            if source_id is not None:
                source = readable.filter(pk=source_id).first()
            else:
                source = readable.filter(model_name_or_path=model).exclude(training={}).order_by("-pk").first()
            training = (source.training if source else {}) or {}
            # Predictions made by a checkpoint replaced since (a training job registered under the
            # answerer's name): named by the training they recorded, not the source's now.
            replaced_by = None
            if replaced is not None and source is not None:
                replaced_by, training = training.get("job_id"), json.loads(replaced)
                n = int(((group["answerer_source_id"] == source_id) & (group["training_recorded"] == replaced)).sum())
                warnings.append(
                    f"Gen-U: the {genu_rule.ANSWERER_NAMES.get(code, code)} checkpoint {model} (source "
                    f"{source.name}) was replaced after {n} of its Gen-U predictions were made (by training job "
                    f"{replaced_by}): they are named by the "
                    f"training they recorded (training job {training.get('job_id')}), not the weights it loads now; "
                    "rerun the Gen-U job to answer them with the new checkpoint.")
            data = training.get("data") or {}
            # How it answered (backend, prompt template, decoding): as its Gen-U jobs recorded, only for
            # the source the predictions name and the reader may read.
            recorded = (answering_recorded(role_code=str(code), answerer_id=source_id, source_ids=rationale_sources)
                        if source_id is not None and source is not None else [])
            # ``answerer_source``: the source whose settings the entry names (the one the predictions
            # record, or the one matched by model path): a reader of the results who may not read it
            # gets them withheld (``scoring.selectors.results_for_reader``).
            entries.append({"model": model, "matched_by": BY_MODEL_PATH if source_id is None else BY_ANSWERER_SOURCE,
                            "answerer_source": source.pk if source is not None else source_id,
                            "fine_tuning_preset": training.get("preset"), "overrides": training.get("overrides"),
                            "base_model": training.get("base_model"),
                            "base_model_in_paper": training.get("base_model_in_paper"),
                            "from_paper": training.get("from_paper"),
                            "trained_on": data or None, "training": training, **_answering_fields(recorded)})
            if replaced is not None and source is not None:
                entries[-1]["checkpoint_replaced"] = {"replaced_by_training_job": replaced_by,
                                                      "answered_with_training_job": training.get("job_id")}
        answerers[genu_rule.ANSWERER_NAMES.get(code, code)] = entries
    results_gen_u["answerers"] = answerers


def _decoding_text(decoding) -> str:
    if not isinstance(decoding, dict):
        return str(decoding)
    if decoding.get("do_sample"):
        text = (f"sampling (temperature {decoding.get('temperature')}, top_p {decoding.get('top_p')}, "
                f"seed {decoding.get('seed')})")
    else:
        text = "greedy"
    text += f", max_new_tokens {decoding.get('max_new_tokens')}"
    if decoding.get("stop"):
        text += f", stop at {json.dumps(decoding['stop'])}"
    return text


def _answering_text(entry: dict) -> str:
    """How an answerer answered: backend, prompt template (and whose it is) and decoding, as its
    Gen-U jobs recorded them; "not recorded" for jobs from before the record."""
    recorded = entry.get("answering") or []
    if not recorded:
        return f"backend, prompt template and decoding {NOT_RECORDED}"
    texts = [f"backend {r.get('backend')}, prompt template {r.get('template')} ({r.get('template_origin')}), "
             f"decoding {_decoding_text(r.get('decoding'))}" for r in recorded]
    return texts[0] if len(texts) == 1 else "answered in several ways: " + " | ".join(texts)


def _paper_text(entry: dict) -> str:
    """What of the answerer's fine-tuning the paper states (SPEC section 4: two T5-base models on
    StrategyQA, nothing more) and what is ours: the preset's name is not a claim that it is the paper's."""
    base, in_paper = entry.get("base_model"), entry.get("base_model_in_paper")
    stated = [FROM_PAPER_NAMES.get(k, k) for k in (entry.get("from_paper") or [])]
    if not stated:
        return "none of its settings is stated by the paper"
    text = f"of its settings the paper states only {', '.join(stated)}"
    if in_paper:
        text += f" ({in_paper})" if not base or base == in_paper else f" ({in_paper}, not this answerer's {base})"
    return text + "; the others are ours or FEB's script's"


def answerer_text(role: str, entry: dict) -> str:
    if entry.get("withheld"):  # a reader who may not read the source (``scoring.selectors.results_for_reader``)
        return f"{role} {entry.get('model')} ({entry['withheld']})"
    preset = entry.get("fine_tuning_preset")
    base = entry.get("base_model")
    text = f"{role} {entry.get('model')} (base {base or NOT_RECORDED}; "
    text += f"fine-tuning preset {preset}: {_paper_text(entry)}" if preset else "training not recorded"
    if entry.get("overrides"):
        text += f"; overridden: {', '.join(entry['overrides'])}"
    replaced = entry.get("checkpoint_replaced")
    if isinstance(replaced, dict):
        text += (f"; the checkpoint of training job {replaced.get('answered_with_training_job')}, replaced since by "
                 f"training job {replaced.get('replaced_by_training_job')}")
    data = entry.get("trained_on") or {}
    if data:
        text += f"; trained on {data.get('dataset')} {data.get('split')}"
        if role == "F^IR":
            text += f" with {data.get('rationales') or 'no rationales'}"
        if data.get("generalization_questions"):
            text += f" and {data['generalization_questions']} generalization questions"
    return text + f"; {_answering_text(entry)})"


# How a Gen-U method names the reading of an answer that did not parse (``gen_u["unparsed_rules"]``).
UNPARSED_METHOD_TEXT = {
    UNPARSED_LEFT_OUT: "questions whose answer did not parse left out (counted as wrong: unparsed_rules)",
    UNPARSED_COUNTED_WRONG: "questions whose answer did not parse counted as wrong (left out: unparsed_rules)",
}


def gen_u_tie_rule_text(gen_u: dict) -> str:
    """The tie rule a run's Gen-U used, as its results recorded it: ``tie_rules.default`` (the
    rule's name), or for a run from before that was recorded its ``tie_rule`` in its own words; a
    run that recorded neither says so, with today's rule named as such (``genu_rule.TIE_RULE``)."""
    default = (gen_u.get("tie_rules") or {}).get("default") if isinstance(gen_u.get("tie_rules"), dict) else None
    if default:
        return f"ties to the {default} score"
    recorded = gen_u.get("tie_rule")
    if isinstance(recorded, str) and recorded:
        return f"ties as results.json gen_u.tie_rule records: {recorded.split('. ')[0].rstrip('.')}"
    return f"tie rule not recorded by this run (today's rule: ties to the {genu_rule.TIE_RULE} score)"


def gen_u_unparsed_text(gen_u: dict) -> str:
    """How a run's Gen-U counted a question whose answer did not parse, as its results recorded it
    (``unparsed_rules.default``); a run from before that was recorded says so, with today's
    reading named as such (``UNPARSED_LEFT_OUT``)."""
    unparsed = gen_u.get("unparsed_rules") if isinstance(gen_u.get("unparsed_rules"), dict) else {}
    default = unparsed.get("default")
    if default in UNPARSED_METHOD_TEXT:
        return UNPARSED_METHOD_TEXT[default]
    if default:
        return f"questions whose answer did not parse: {(unparsed.get('rules') or {}).get(default) or default} " \
               "(unparsed_rules)"
    return ("how questions whose answer did not parse counted is not recorded by this run (today's reading: "
            f"{UNPARSED_METHOD_TEXT[UNPARSED_LEFT_OUT].split(' (')[0]})")


def gen_u_inputs_text(gen_u: dict) -> str:
    """How many predictions the figures left out as answered on a question or rationale that changed
    since (``gen_u.inputs``, :data:`INPUTS_LEFT_OUT_RULE`); empty where none was (or a run from before
    it was recorded). Those kept though they record nothing are named by a warning, as faithfulness's are."""
    by_source = (gen_u.get("inputs") or {}).get("by_source") if isinstance(gen_u.get("inputs"), dict) else None
    if not isinstance(by_source, dict):
        return ""

    def total(key):
        return sum(int(entry.get(key) or 0) for entry in by_source.values() if isinstance(entry, dict))

    if not total("n_left_out"):
        return ""
    return (f"{total('n_left_out')} predictions left out: their question or rationale changed since they were "
            "answered (gen_u.inputs)")


def gen_u_method_text(gen_u: dict) -> str:
    """One line naming what a Gen-U figure rests on: the questions, the tie rule and how an answer
    that did not parse counted, as the run recorded them (``gen_u_tie_rule_text``,
    ``gen_u_unparsed_text``: today's rules only where it recorded none, and then said to be
    today's), and each answerer with its fine-tuning preset and data (for F^IR, which rationales it
    was trained on). Shown wherever a Gen-U figure is; rebuilt from an old run's results when an
    answerer is withheld from its reader (``scoring.selectors.results_for_reader``)."""
    parts = [f"Gen-U on {gen_u.get('question_filter')}", gen_u_tie_rule_text(gen_u), gen_u_unparsed_text(gen_u)]
    answered = gen_u_questions_answered_text(gen_u)
    if answered:
        parts.append(answered)
    inputs = gen_u_inputs_text(gen_u)
    if inputs:
        parts.append(inputs)
    for role in ("F^I", "F^IR"):
        for entry in (gen_u.get("answerers") or {}).get(role, []):
            parts.append(answerer_text(role, entry))
    return "; ".join(parts)


def gen_u_questions_answered_text(gen_u: dict) -> str:
    """Which questions each source's Gen-U rests on, where the run recorded that a source lacks
    predictions of questions that count now (``gen_u["questions_answered"]``: the two readings
    then differ); empty where every source answered every question (they coincide) or the run
    recorded nothing of it."""
    block = gen_u.get("questions_answered")
    if not isinstance(block, dict) or not any(
            isinstance(entry, dict) and entry.get("n_questions_without_predictions")
            for entry in (block.get("by_source") or {}).values()):
        return ""
    default = block.get("default")
    others = [rule for rule in (block.get("rules") or {}) if rule != default]
    return (f"questions: {(block.get('rules') or {}).get(default, default)} ({default}; results.json "
            f"gen_u.questions_answered gives {', '.join(others) or 'no other reading'} beside it)")


def gen_u_results(frame: pd.DataFrame, *, reader) -> Part:
    """Each unit's Gen-U added to ``frame`` (columns item_id, source_id, source), and the ``gen_u``
    block of the results: counts, consistency of the answerers (``answerer_consistency``, each over
    its own predictions of the questions that count now; ``consistency_incomplete_rules``: with a
    bundle that has a question with no prediction or an answer that did not parse left out as
    incomplete, the default, and counted as not consistent), what was left out and why, the
    method (question filter, tie rule, answerers with their fine-tuning settings) and ``tie_rules``:
    the Gen-U shares and mean per source under each tie rule and with tied items left out, with
    the number of tied items (SPEC section 4 picks the lowest as the conservative reading), and ``unparsed_rules``: the same figures,
    under the default tie rule, with an answer that did not parse left out (the default) and
    counted as wrong (SPEC states no rule), and ``inputs``: per source, the predictions left out because
    their question or rationale changed since they were answered, those kept that record nothing of it
    and those of a checkpoint replaced since (:data:`INPUTS_LEFT_OUT_RULE`; :func:`_inputs_left_out`).
    ``reader``: the study's owner, whose
    right to read a source decides whether its fine-tuning settings are named
    (``answerer_sources_readable``)."""
    names = dict(zip(frame["source_id"], frame["source"], strict=False))
    preds, inputs_block, inputs_warnings = _inputs_left_out(_gen_u_predictions(frame["item_id"].unique(), names))
    per_q, per_item, counts, warnings = genu_rule.genu_frame(preds)
    warnings = [*inputs_warnings, *warnings]
    frame = frame.drop(columns=["gen_u"], errors="ignore").merge(
        per_item[["item_id", "source", "gen_u"]], on=["item_id", "source"], how="left"
    )
    have = set(per_item["source"]) if len(per_item) else set()
    for source in sorted(set(frame["source"]) - have):
        entry = inputs_block["by_source"].get(str(source)) or {}
        if entry.get("n_left_out"):
            # It has predictions, left out as stale (_inputs_left_out): not "none".
            warnings.append(f"Source {source}: {entry['n_left_out']} of its {entry['n_predictions']} Gen-U predictions "
                            "are left out as stale (their question or rationale changed since they were answered; "
                            "gen_u.inputs) and the others give no Gen-U; Gen-U is not computed for it.")
        else:
            warnings.append(f"Source {source} has no Gen-U predictions; Gen-U is not computed for it.")
    if not len(preds):
        # Every prediction left out (or none): what was left out and why is still recorded.
        inputs_text = gen_u_inputs_text({"inputs": inputs_block})
        return Part({"gen_u": {"inputs": inputs_block, "method": f"Gen-U not computed: {inputs_text}"}}
                    if inputs_text else {}, warnings, frame)
    # the questions that count now on each scored (item, source): the answerers' bundles and questions_answered
    expected = _questions_counting_now(frame, preds)
    consistency = answerer_consistency(preds, expected=expected)
    gen_u = {
        "n_items_with_gen_u": int(len(per_item)),
        "n_questions": int(len(per_q)),
        "unparseable": counts,
        "consistency": consistency,
        "consistency_bundle": CONSISTENCY_BUNDLE,
        "consistency_incomplete_rules": _consistency_incomplete_rules(preds, expected, consistency),
        "inputs": inputs_block,
    }
    _gen_u_method(preds, gen_u, warnings, reader=reader)
    # The tie rules' effect on the scored units' (question, source) pairs, the ones the shares and
    # Theil's U above count (predictions may exist for pairs the study has no unit of).
    scored = _scored_pairs(per_item, frame)
    gen_u["tie_rules"] = {
        "default": genu_rule.TIE_RULE, "rules": dict(genu_rule.TIE_RULES),
        "by_source": genu_rule.tie_rule_effect(scored),
    }
    if "utility" in frame:
        gen_u["tie_rules"]["theils_u_utility_given_gen_u"] = _theils_u_by_tie_rule(frame, scored)
    gen_u["unparsed_rules"] = _unparsed_rules(preds, frame, scored, gen_u["tie_rules"])
    gen_u["n_questions_conflicting_answers"] = int(preds.loc[preds["conflicted"], "question_id"].nunique())
    gen_u["conflicting_answers"] = _conflicting_answers(preds, frame, scored, gen_u["tie_rules"], expected)
    gen_u["unvalidated_questions"] = _readings_without(
        preds, frame, scored, gen_u["tie_rules"], expected, column="unvalidated",
        block=unvalidated_block(int(preds.loc[preds["unvalidated"], "question_id"].nunique())),
        consistency_key="consistency_validated_only")
    if gen_u["n_questions_conflicting_answers"]:
        warnings.append(f"Gen-U counts {gen_u['n_questions_conflicting_answers']} generalization questions their file "
                        "gave twice with different answers, with the first answer (our choice, SPEC is silent); "
                        "gen_u.conflicting_answers gives the figures with them left out.")
    gen_u["questions_answered"], answered_warnings = _questions_answered(preds, frame, scored, gen_u["tie_rules"],
                                                                         expected)
    warnings.extend(answered_warnings)
    # named last, from the rules recorded above: the method is what this run's results say it used
    gen_u["method"] = gen_u_method_text(gen_u)
    return Part({"gen_u": gen_u}, warnings, frame)


# The two readings of the questions a source's Gen-U rests on (``gen_u["questions_answered"]``). A Gen-U
# job answers the questions that count when it runs; one validated (or added) later counts for every
# source from then on but has predictions only from the sources whose job ran (or resumed) after it.
AS_ANSWERED = "as_answered"
EVERY_SOURCE_ANSWERED = "every_source_answered"
QUESTIONS_ANSWERED_RULES = {
    AS_ANSWERED: "each source's Gen-U rests on the questions its Gen-U job answered (the published figures); "
                 "sources may rest on different questions of one item",
    EVERY_SOURCE_ANSWERED: "each item's Gen-U rests on the questions that every source scored on the item has "
                           "predictions for, so sources are compared on the same questions",
}


def _questions_counting_now(frame: pd.DataFrame, preds: pd.DataFrame) -> pd.DataFrame:
    """The questions that count now on each scored (item, source) pair of ``frame`` whose source has
    Gen-U predictions (``preds``; a source with none is named by ``gen_u_results``' warning and
    expects nothing): the item's validated questions (``questions_that_count``, on the
    validated-only default reading, :data:`VALIDATED_ONLY_READING`) and any other that counts and
    that some source answered (a job told to answer unvalidated questions). One row per
    (question_id, item_id, source), with ``conflicted`` (its file gave it twice with different
    answers, ``question_conflicted``), ``unvalidated`` (nobody validated it) and ``answered``:
    whether the source has a prediction of it.
    The answerers' consistency (``answerer_consistency``) bundles these questions too."""
    pairs = frame.loc[frame["source"].isin(preds["source"].unique()), ["item_id", "source"]].drop_duplicates()
    validated = pd.DataFrame.from_records(list(GeneralizationQuestion.objects.filter(
        questions_that_count(), item_id__in=[int(i) for i in pairs["item_id"].unique()],
        validation_status=GeneralizationQuestion.Validation.VALID).annotate(
        conflicted=question_conflicted()).values_list("pk", "item_id", "conflicted")),
        columns=["question_id", "item_id", "conflicted"])
    validated["conflicted"] = validated["conflicted"].fillna(False).astype(bool)
    validated["unvalidated"] = False
    questions = pd.concat([validated, preds[["question_id", "item_id", "conflicted", "unvalidated"]]]).drop_duplicates(
        ["question_id", "item_id"])
    questions["unvalidated"] = questions["unvalidated"].astype(bool)
    expected = pairs.merge(questions, on="item_id", how="inner")
    answered = preds[["question_id", "item_id", "source"]].drop_duplicates().assign(answered=True)
    expected = expected.merge(answered, on=["question_id", "item_id", "source"], how="left")
    expected["answered"] = expected["answered"].fillna(False).astype(bool)
    return expected


def _questions_answered(preds: pd.DataFrame, frame: pd.DataFrame, scored: pd.DataFrame,
                        tie_rules: dict, expected: pd.DataFrame) -> tuple[dict, list[str]]:
    """Per source, the questions that count now on its scored items (``n_questions``,
    :func:`_questions_counting_now`) and those of them it has no prediction of
    (``n_questions_without_predictions``: its Gen-U job ran before they were validated or added;
    ``expected``: :func:`_questions_counting_now`'s rows),
    with a warning naming each source that has some. Where any source has, the Gen-U figures
    (default tie rule, scored pairs) under each reading of :data:`QUESTIONS_ANSWERED_RULES`, in
    ``_unparsed_rules``' shape: the default's are ``tie_rules``'. Only sources with Gen-U
    predictions are counted, and the every-source reading is over them; each entry of
    ``by_source`` (each such source and, with more than one, ``all``) has both readings, with null
    figures (n 0, mean None) where a reading leaves it no item."""
    out: dict = {"default": AS_ANSWERED, "rules": dict(QUESTIONS_ANSWERED_RULES), "by_source": {}}
    warnings = []
    for source, g in expected.groupby("source", sort=True):
        missing = int((~g["answered"]).sum())
        out["by_source"][str(source)] = {"n_questions": int(len(g)), "n_questions_without_predictions": missing}
        if missing:
            warnings.append(f"Gen-U of {source} leaves out {missing} questions that count now but that its Gen-U job "
                            "did not answer (they were validated or added after it ran): resume or rerun its Gen-U "
                            "job to compare sources on the same questions.")
    if len(out["by_source"]) > 1:
        out["by_source"][pipeline.ALL] = {
            key: sum(entry[key] for entry in out["by_source"].values())
            for key in ("n_questions", "n_questions_without_predictions")}
    if not warnings:
        return out, warnings
    # A question every source scored on its item answered: none of the item's scored pairs lacks it.
    unanswered = expected.loc[~expected["answered"], ["question_id"]].drop_duplicates()
    common = preds.loc[~preds["question_id"].isin(unanswered["question_id"])]
    every = _scored_pairs(genu_rule.genu_frame(common)[1], frame)
    readings = {AS_ANSWERED: (scored, tie_rules["by_source"]),
                EVERY_SOURCE_ANSWERED: (every, genu_rule.tie_rule_effect(every))}
    for reading, (per_item, effect) in readings.items():
        questions = _questions_by_source(per_item) if len(per_item) else {}
        for key, entry in out["by_source"].items():
            entry[reading] = {**_reading_figures(effect, key), "n_questions": questions.get(key, 0)}
    out["tie_rule"] = genu_rule.TIE_RULE
    return out, warnings


def _reading_figures(effect: dict, key: str) -> dict:
    """The default tie rule's figures of ``key`` (a source or ``all``) in ``effect``
    (``genu_rule.tie_rule_effect``'s): over all with one source scored, that source's (the effect
    names no ``all`` then); null figures (n 0, mean None) where ``key`` has no item."""
    if key == pipeline.ALL and key not in effect and len(effect) == 1:
        key = next(iter(effect))
    if key in effect:
        return effect[key][genu_rule.TIE_RULE]
    empty = pd.DataFrame(columns=genu_rule.ITEM_COLUMNS + genu_rule.TIE_COLUMNS)
    return genu_rule.tie_rule_effect(empty)[pipeline.ALL][genu_rule.TIE_RULE]


def _conflicting_answers(preds: pd.DataFrame, frame: pd.DataFrame, scored: pd.DataFrame, tie_rules: dict,
                         expected: pd.DataFrame) -> dict:
    """Gen-U under each reading of ``CONFLICTING_RULES`` (``_readings_without``: the questions
    their file gave twice with different answers kept, the default, and left out); only the rule
    and the count when no question that counts had conflicting answers."""
    return _readings_without(preds, frame, scored, tie_rules, expected, column="conflicted",
                             block=conflicting_block(int(preds.loc[preds["conflicted"], "question_id"].nunique())),
                             consistency_key="consistency_left_out")


def _readings_without(preds: pd.DataFrame, frame: pd.DataFrame, scored: pd.DataFrame, tie_rules: dict,
                      expected: pd.DataFrame, *, column: str, block: dict, consistency_key: str) -> dict:
    """``block`` (a readings block: its ``default``, the published figures, and one other reading,
    which leaves out the questions flagged by ``column`` of ``preds`` and ``expected``) with Gen-U
    under each reading (the default tie rule, the scored units' pairs), in ``_unparsed_rules``'
    shape, and under ``consistency_key`` the answerers' consistency with those questions left out
    (of the predictions and of the bundles, ``expected``: :func:`_questions_counting_now`'s rows);
    only the block when no question that counts is flagged. Conflicting answers
    (``CONFLICTING_RULES``) and unvalidated questions (``QUESTION_READINGS``) both read this way."""
    out = dict(block)
    if not preds[column].any():
        return out
    other = next(rule for rule in out["rules"] if rule != out["default"])
    kept = preds.loc[~preds[column]]
    per_item = genu_rule.genu_frame(kept)[1]
    left_out = _scored_pairs(per_item, frame)
    readings = {out["default"]: (scored, tie_rules["by_source"]),
                other: (left_out, genu_rule.tie_rule_effect(left_out))}
    by_source: dict = {}
    for reading, (items, effect) in readings.items():
        questions = _questions_by_source(items) if len(items) else {}
        for source, entry in effect.items():
            by_source.setdefault(source, {})[reading] = {**entry[genu_rule.TIE_RULE],
                                                         "n_questions": questions.get(source, 0)}
    out.update(tie_rule=genu_rule.TIE_RULE, by_source=by_source)
    out[consistency_key] = answerer_consistency(kept, expected=expected.loc[~expected[column]])
    if "utility" in frame:
        gen_u_column = f"gen_u_{genu_rule.TIE_RULE}"
        units = frame[["item_id", "source", "utility"]]
        out["theils_u_utility_given_gen_u"] = {
            reading: pipeline.theils_u_utility_given(units.merge(items, on=["item_id", "source"], how="inner"),
                                                     gen_u_column)
            for reading, (items, _) in readings.items()}
    return out


def answerer_consistency(preds: pd.DataFrame, reading: str = BUNDLE_INCOMPLETE_LEFT_OUT, *,
                         expected: pd.DataFrame) -> dict:
    """Per source, F^I's and F^IR's consistency over the items' generalization questions
    (``CONSISTENCY_BUNDLE``), each from its own predictions in ``preds`` (``_gen_u_predictions``: the
    questions that count), under ``reading`` of ``CONSISTENCY_INCOMPLETE_RULES``. A bundle is every
    question of the item that counts now for the source (``expected``: :func:`_questions_counting_now`'s
    rows; a prediction of a question outside them is a member too), so one the answerer has no
    prediction of, or whose output did not parse, makes the bundle incomplete: left out under the
    default, counted as not consistent at its full size under ``counted_not_consistent``.
    ``bundle_consistency``'s figures with ``n_bundles_incomplete``, ``n_answers_unparsed`` and
    ``n_questions_without_predictions`` (their members that make bundles incomplete)."""
    if reading not in CONSISTENCY_INCOMPLETE_RULES:
        raise ValueError(f"unknown consistency reading {reading!r}: choose one of "
                         f"{', '.join(CONSISTENCY_INCOMPLETE_RULES)}")
    # one prediction per (question, source, answerer), the first, as Gen-U reads it (``genu_frame``)
    own = preds.drop_duplicates(["question_id", "source", "answerer"])
    members_expected = expected[["question_id", "item_id", "source"]].drop_duplicates()
    out: dict = {}
    for source in sorted(set(own["source"]) | set(members_expected["source"])):
        g = own.loc[own["source"] == source]
        counting = members_expected.loc[members_expected["source"] == source, ["question_id", "item_id"]]
        out[source] = {}
        for code, name in genu_rule.ANSWERER_NAMES.items():
            answers = g.loc[g["answerer"] == code, ["question_id", "item_id", "correct", "parsed"]].assign(
                predicted=True)
            missing = counting.loc[~counting["question_id"].isin(answers["question_id"])].assign(
                correct=False, parsed=False, predicted=False)
            members = pd.concat([answers, missing], ignore_index=True)
            parsed = members["parsed"].astype(bool)
            incomplete = members.loc[~parsed, "item_id"].unique()
            counted = (~members["item_id"].isin(incomplete) if reading == BUNDLE_INCOMPLETE_LEFT_OUT
                       else pd.Series(True, index=members.index))
            right = members["correct"].fillna(False).astype(bool) & parsed
            predicted = members["predicted"].astype(bool)
            out[source][name] = {**bundle_consistency(right[counted], members.loc[counted, "item_id"]),
                                 "n_bundles_incomplete": int(len(incomplete)),
                                 "n_answers_unparsed": int((predicted & ~parsed).sum()),
                                 "n_questions_without_predictions": int((~predicted).sum())}
    return out


def _consistency_incomplete_rules(preds: pd.DataFrame, expected: pd.DataFrame, default: dict) -> dict:
    """The answerers' consistency under each reading of ``CONSISTENCY_INCOMPLETE_RULES``
    (``answerer_consistency`` over ``expected``'s bundles), in ``_unparsed_rules``' shape with the
    human answers' ``incomplete_rule``: {default, incomplete_rule, rules, spec, by_source: {source:
    {F^I|F^IR: {reading: figures}}}}; the default's figures are ``gen_u["consistency"]``'s
    (``default``, computed once)."""
    readings = {reading: default if reading == BUNDLE_INCOMPLETE_LEFT_OUT
                else answerer_consistency(preds, reading, expected=expected)
                for reading in CONSISTENCY_INCOMPLETE_RULES}
    by_source = {source: {name: {reading: readings[reading][source][name] for reading in readings}
                          for name in entry}
                 for source, entry in readings[BUNDLE_INCOMPLETE_LEFT_OUT].items()}
    return {"default": BUNDLE_INCOMPLETE_LEFT_OUT,
            "incomplete_rule": CONSISTENCY_INCOMPLETE_RULES[BUNDLE_INCOMPLETE_LEFT_OUT],
            "rules": dict(CONSISTENCY_INCOMPLETE_RULES), "spec": CONSISTENCY_INCOMPLETE_SPEC, "by_source": by_source}


def _scored_pairs(per_item: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``per_item`` (``genu_rule.genu_frame``'s) on the scored units' (item, source) pairs only."""
    return per_item.merge(frame[["item_id", "source"]].drop_duplicates(), on=["item_id", "source"], how="inner")


def _unparsed_rules(preds: pd.DataFrame, frame: pd.DataFrame, scored: pd.DataFrame, tie_rules: dict) -> dict:
    """The Gen-U figures under each reading of ``UNPARSED_RULES``, with the default tie rule, on the
    scored units' pairs, in ``tie_rules``' shape: per source and over all, the shares and mean
    (``genu_rule.tie_rule_effect``) and the questions each reading counts; with utility, Theil's
    U(utility | Gen-U) too. The default reading's figures are those of ``tie_rules`` (``scored``);
    the other recomputes Gen-U with the one definition on the same predictions, an answer that did
    not parse (stored with a blank predicted answer, ``_gen_u_predictions``) read as a parsed wrong one."""
    as_wrong = preds.assign(correct=preds["correct"].astype(bool) & preds["parsed"], parsed=True)
    wrong = _scored_pairs(genu_rule.genu_frame(as_wrong)[1], frame)
    readings = {UNPARSED_LEFT_OUT: (scored, tie_rules["by_source"]),
                UNPARSED_COUNTED_WRONG: (wrong, genu_rule.tie_rule_effect(wrong))}
    by_source: dict = {}
    for reading, (per_item, effect) in readings.items():
        questions = _questions_by_source(per_item)
        for source, entry in effect.items():
            by_source.setdefault(source, {})[reading] = {**entry[genu_rule.TIE_RULE],
                                                         "n_questions": questions.get(source, 0)}
    out = {"default": UNPARSED_LEFT_OUT, "rules": dict(UNPARSED_RULES), "spec": UNPARSED_SPEC,
           "tie_rule": genu_rule.TIE_RULE, "by_source": by_source}
    if "utility" in frame:
        column = f"gen_u_{genu_rule.TIE_RULE}"
        units = frame[["item_id", "source", "utility"]]
        out["theils_u_utility_given_gen_u"] = {
            reading: pipeline.theils_u_utility_given(units.merge(per_item, on=["item_id", "source"], how="inner"),
                                                     column)
            for reading, (per_item, _) in readings.items()}
    return out


def _questions_by_source(per_item: pd.DataFrame) -> dict:
    """The questions Gen-U counts per source and over all (as ``tie_rule_effect`` names them)."""
    counts = {str(s): int(n) for s, n in per_item.groupby("source", sort=True)["n_questions"].sum().items()}
    return {**counts, pipeline.ALL: int(per_item["n_questions"].sum())}


def _theils_u_by_tie_rule(frame: pd.DataFrame, scored: pd.DataFrame) -> dict:
    """Theil's U(utility | Gen-U) (SPEC section 3) under each tie rule and with tied items left out, per
    source and over all: SPEC section 4 picks the lowest as the conservative reading, and the report shows what each reading gives
    next to the default's figure."""
    units = frame[["item_id", "source", "utility"]].merge(scored, on=["item_id", "source"], how="inner")
    out = {rule: pipeline.theils_u_utility_given(units, f"gen_u_{rule}") for rule in genu_rule.TIE_RULES}
    untied = units.loc[~units["tied"].astype(bool)]
    out[genu_rule.TIES_LEFT_OUT] = pipeline.theils_u_utility_given(untied, f"gen_u_{genu_rule.TIE_RULE}")
    return out

