"""Serializers of the scoring API."""
from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from rest_framework import serializers

from scoring.api.export_units import (
    MAJORITY_NOT_RECORDED,
    SCORE_COLUMNS,
    SCORED_WITH_COLUMNS,
    SCORED_WITH_READS,
    ScoredWith,
)
from scoring.metrics.labels import UTILITY_NAMES
from scoring.models import ScoreRun, UnitScore
from scoring.selectors import warnings_for_reader
from scoring.services.score import TASK_ACCURACY_COUNTED_WRONG, TASK_ACCURACY_LEFT_OUT, TASK_ACCURACY_RULES


class _ScoredWithValue:
    """A unit-score row's ``SCORED_WITH_COLUMNS`` value under the field's name, read from the
    serializer's ``_scored_with`` (``ScoredWith.values``, as the exports read it)."""

    def to_representation(self, obj):
        return self.parent._scored_with(obj)[self.field_name]


# One field class per export column type, so that the OpenAPI schema gives each column's type.
_SCORED_WITH_FIELDS = {kind: type(f"ScoredWith{base.__name__}", (_ScoredWithValue, base), {})
                       for kind, base in (("int", serializers.IntegerField), ("str", serializers.CharField),
                                          ("bool", serializers.BooleanField), ("float", serializers.FloatField))}


def _scored_with_fields() -> dict[str, serializers.Field]:
    """A read-only, nullable field per ``SCORED_WITH_COLUMNS`` column, in their order, of its type
    and described as the exports describe it: the API row carries every column the exports end
    with, from their one list (a column appended there is appended here)."""
    return {name: _SCORED_WITH_FIELDS[column.kind](source="*", read_only=True, allow_null=True,
                                                   help_text=column.description)
            for name, column in SCORED_WITH_COLUMNS.items()}


# What the row's own run computed its scores with, as the exports (``SCORED_WITH_COLUMNS``) and the
# summary give it: the run, its settings, whether the answers changed since (``stale``), the majority
# rule it aggregated the answers by (``majority_rule``) and which answers it counted
# (``counted_answers``, ``counted_tasks_failing_a_check``, ``other_readings``).
_ScoredWithColumns = type("_ScoredWithColumns", (serializers.Serializer,), _scored_with_fields())
# The unit-score export's description of ``reported_utility`` (its column is the model field).
REPORTED_UTILITY_HELP = {c.name: c.description for c in SCORE_COLUMNS}["reported_utility"]


class UnitScoreSerializer(_ScoredWithColumns, serializers.ModelSerializer):
    item_external_id = serializers.CharField(source="item.external_id", read_only=True)
    split = serializers.CharField(source="item.split", read_only=True)
    gold_answer = serializers.CharField(source="item.gold_answer", read_only=True)
    source_name = serializers.CharField(source="source.name", read_only=True)
    utility_label = serializers.SerializerMethodField(help_text="useful, unsure or not_useful; empty if unscored.")
    # Why ``stale`` is true, and where scores no run here wrote came from (a copy of a study bundle).
    stale_reason = serializers.SerializerMethodField(help_text=(
        "Why `stale` is true (empty when it is false; null when nothing says: not scored): e.g. how many answers "
        "count now against what the run aggregated, or, for a copy of a study bundle not scored here, that the "
        "bundle's settings.json scores_stale said so."))
    scores_from = serializers.SerializerMethodField(help_text=(
        "Where the scores came from when no run here wrote them (empty `score_run`) and the study is a copy of a "
        "study bundle: the bundle's file, when it was imported, the study and run that scored them where the "
        "bundle was made, and whether the bundle called them stale; null otherwise (`score_run` names the run)."))

    class Meta:
        model = UnitScore
        fields = [
            "id", "study", "item", "item_external_id", "split", "source", "source_name", "gold_answer",
            "n_annotators", "before_majority", "after_majority", "before_tie", "after_tie", "before_correct",
            "after_correct", "utility", "utility_label", "task_correct", "gen_u", "similarity", "imported",
            "updated_at", "reported_utility", *SCORED_WITH_COLUMNS, "stale_reason", "scores_from",
        ]
        read_only_fields = ["study", "item", "source"]  # output only: writable, a form would list every row
        extra_kwargs = {"reported_utility": {"help_text": REPORTED_UTILITY_HELP}}

    def get_utility_label(self, obj) -> str:
        return UTILITY_NAMES.get(obj.utility, "")

    def _runs(self, obj) -> ScoredWith:
        """The row's study's ``ScoredWith`` (its runs read once, the study's counting answers once,
        for a page: the serializer's context is shared by a list's rows), as the request's user may
        read them (``export_units.scored_with_run``; without a request, as a reader who may read no
        answerer source)."""
        cache = self.context.setdefault("_scored_with", {}) if isinstance(self.context, dict) else {}
        runs = cache.get(obj.study_id)
        if runs is None:
            request = self.context.get("request") if isinstance(self.context, dict) else None
            user = getattr(request, "user", None) or AnonymousUser()
            runs = cache[obj.study_id] = ScoredWith(obj.study_id, user=user)
        return runs

    def _scored_with(self, obj) -> dict:
        """``SCORED_WITH_COLUMNS`` of the row (``ScoredWith.values``, as the exports read them), worked
        out once per row for all its fields."""
        row = getattr(self, "_scored_with_row", None)
        if row is None or row[0] is not obj:
            values = self._runs(obj).values(*(getattr(obj, name) for name in SCORED_WITH_READS))
            row = self._scored_with_row = (obj, dict(zip(SCORED_WITH_COLUMNS, values, strict=True)))
        return row[1]

    def get_stale_reason(self, obj) -> str | None:
        return self._runs(obj).stale_reason(*(getattr(obj, name) for name in SCORED_WITH_READS))

    def get_scores_from(self, obj) -> str | None:
        return self._runs(obj).scores_from(obj.score_run_id)


class ScoreRunSerializer(serializers.ModelSerializer):
    has_results = serializers.SerializerMethodField(help_text="results.json is available (status done).")
    warnings = serializers.SerializerMethodField(
        help_text="What was missing or needs a look when scoring, as the user may read it (results.json's "
                  "warnings: a study that lent this one utility and the user may not view is not named).")

    class Meta:
        model = ScoreRun
        fields = ["id", "study", "status", "has_results", "warnings", "error", "task_id", "created_at", "finished_at"]
        # A run is started through ScoreRunStartSerializer (its study checked against what the user
        # may see); writable here, the browsable API's form listed every study on the server.
        read_only_fields = ["study"]

    def get_has_results(self, obj) -> bool:
        return obj.status == ScoreRun.Status.DONE and bool(obj.results)

    def get_warnings(self, obj) -> list[str]:
        request = self.context.get("request") if isinstance(self.context, dict) else None
        return warnings_for_reader(obj, user=getattr(request, "user", None) or AnonymousUser())


class FullUnitsSharesSerializer(serializers.Serializer):
    """One source's utility shares over its full units only (results.json
    ``short_units.utility_shares_full_units_only``), each with its bootstrap interval."""

    n = serializers.IntegerField(help_text="Full units (units with every answer they need) the shares are over.")
    useful = serializers.FloatField(allow_null=True)
    useful_ci = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True)
    unsure = serializers.FloatField(allow_null=True)
    unsure_ci = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True)
    not_useful = serializers.FloatField(allow_null=True)
    not_useful_ci = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True)
    no_majority_before = serializers.IntegerField(allow_null=True, help_text=(
        "Of those units, the ones without a majority before the rationale (counted wrong; results.json "
        "utility_shares' per-source ties, pipeline.tie_counts). Null: a run from before they were recorded."))
    no_majority_after = serializers.IntegerField(allow_null=True, help_text=(
        "Of those units, the ones without a majority after the rationale (counted wrong). Null: a run from "
        "before they were recorded."))


class SourceSummarySerializer(serializers.Serializer):
    source = serializers.IntegerField()
    source_name = serializers.CharField()
    n_units = serializers.IntegerField()
    n_scored = serializers.IntegerField(help_text="Units with a utility (scored).")
    n_useful = serializers.IntegerField()
    n_unsure = serializers.IntegerField()
    n_not_useful = serializers.IntegerField()
    share_useful = serializers.FloatField(allow_null=True)
    share_unsure = serializers.FloatField(allow_null=True)
    share_not_useful = serializers.FloatField(allow_null=True)
    n_before_ties = serializers.IntegerField(help_text="Units without a majority before the rationale.")
    n_after_ties = serializers.IntegerField(help_text="Units without a majority after the rationale.")
    accuracy_before = serializers.FloatField(allow_null=True, help_text=(
        "Share of the scored units (n_scored) whose majority was right before; null when none is scored."))
    accuracy_after = serializers.FloatField(allow_null=True, help_text=(
        "Share of the scored units (n_scored) whose majority was right after; null when none is scored."))
    n_task_known = serializers.IntegerField(help_text=(
        "Units with the source's predicted answer: the units task_accuracy is over (results.json task_accuracy_n)."))
    # The rule in the words of its owner (``TASK_ACCURACY_RULES``), as the report and the bundle give it.
    task_accuracy = serializers.FloatField(allow_null=True, help_text=(
        "Share of the units with the source's predicted answer (n_task_known) where it was right; units without "
        f"one are left out ({TASK_ACCURACY_RULES[TASK_ACCURACY_LEFT_OUT]}). results.json task_accuracy_readings "
        f"also gives the other reading: {TASK_ACCURACY_RULES[TASK_ACCURACY_COUNTED_WRONG]}. Null when no unit has "
        "a predicted answer."))
    mean_gen_u = serializers.FloatField(allow_null=True)
    mean_similarity = serializers.FloatField(allow_null=True)
    score_run = serializers.IntegerField(allow_null=True, help_text=(
        "The study's latest finished scoring run, whose settings these lines give (its results.json: "
        "/studies/{id}/results/); null when the study has none. Each unit's own run, and whether its scores are "
        "stale, are in the unit-score export."))
    similarity_model = serializers.CharField(allow_null=True, help_text=(
        "The model, layer and method behind mean_similarity, e.g. \"mini, layer 6; BERTScore F1 against the gold "
        "rationale, no baseline rescaling\" (a run that recorded no method: model and layer only; null: similarity "
        "was not computed)."))
    gen_u_method = serializers.CharField(allow_null=True, help_text=(
        "What mean_gen_u rests on: the question filter, the tie rule and the answerers with their training."))
    majority_rule = serializers.CharField(allow_null=True, help_text=(
        "The majority rule score_run aggregated each unit's answers by, which the utility counts and shares, the "
        "ties and the accuracies rest on, as that run's results.json majority_readings records it: its default "
        "reading, then the tie rule (e.g. \"plurality (...); a tie is no majority answer and counts as wrong; ...\"). "
        "With three or more choices a strict majority gives other utilities (results.json majority_readings). "
        f"\"{MAJORITY_NOT_RECORDED}: ...\" for a run that recorded no rule; null when the study has no run."))
    # Which answers score_run counted (``export_units.scored_with_run``, the exports' columns of the same name).
    counted_answers = serializers.CharField(allow_null=True, help_text=SCORED_WITH_COLUMNS["counted_answers"].description)
    counted_tasks_failing_a_check = serializers.IntegerField(
        allow_null=True, help_text=SCORED_WITH_COLUMNS["counted_tasks_failing_a_check"].description)
    other_readings = serializers.CharField(allow_null=True, help_text=SCORED_WITH_COLUMNS["other_readings"].description)
    # Units short of annotators, as score_run's results.json short_units records them
    # (``short_units_of_source``): null, never 0, where the run recorded none.
    n_short = serializers.IntegerField(allow_null=True, help_text=(
        "This source's units score_run scored short of annotators (fewer answers than the study asks for), on the "
        "answers they have: the shares, counts and accuracies above include them (results.json short_units "
        "n_short_by_source). Null when the run recorded no short units (imported outcomes, or a run from before "
        "they were recorded) or the study has no run."))
    full_units_rule = serializers.CharField(allow_null=True, help_text=(
        "The other reading, in score_run's own words (results.json short_units full_units_rule): the units it "
        "keeps; full_units_only gives this source's shares under it. Null when the run recorded no short units."))
    full_units_only = FullUnitsSharesSerializer(allow_null=True, help_text=(
        "This source's utility shares under full_units_rule (results.json short_units "
        "utility_shares_full_units_only), each with its bootstrap interval; null when no unit of the run was short "
        "(the shares above are then the same) or the run recorded no short units."))
