"""Serializers of the cockpit's own endpoints (the study's withdrawals, and the per-source summary
with whether its scores are stale)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from annotations.models import Withdrawal
from lab.api.serializers import RejectUnknownFieldsMixin
from scoring.api.serializers import SourceSummarySerializer


class WithdrawalRequestSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """Who to withdraw: exactly one of the three (the service refuses none or two); any other key is a
    400 naming it."""

    pseudonym = serializers.CharField(required=False, allow_blank=True, max_length=64,
                                      help_text="The worker's pseudonym as pages and exports show it (w_...).")
    worker_id = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                      help_text="The platform's worker id (MTurk WorkerId, Prolific PID).")
    participant_identifier = serializers.CharField(
        required=False, allow_blank=True, max_length=254,
        help_text="The participant identifier the person typed on a link (a lab id or e-mail address).")


class WithdrawalSerializer(serializers.ModelSerializer):
    """A withdrawal's audit record: no pseudonym, no platform id."""

    withdrawn_by = serializers.CharField(source="withdrawn_by.get_username", read_only=True, default=None,
                                         allow_null=True)

    class Meta:
        model = Withdrawal
        fields = ["id", "study", "withdrawn_by", "withdrawn_at", "last_applied_at", "n_answers", "n_counted_answers",
                  "n_tasks"]
        read_only_fields = fields


class WithdrawalOutcomeSerializer(WithdrawalSerializer):
    """A withdrawal's audit record, and the copies of the study made from its bundle here that the
    same request reached (``participant_withdraw``'s outcome, given as ``context["outcome"]``): counts only."""

    copies_withdrawn = serializers.SerializerMethodField(
        help_text="Copies of this study imported from its bundle here that the worker was withdrawn from now.")
    copies_not_changeable = serializers.SerializerMethodField(
        help_text="Further such copies that still hold the worker but are not yours to change: their owners "
                  "withdraw them there, by the pseudonym.")

    class Meta(WithdrawalSerializer.Meta):
        fields = [*WithdrawalSerializer.Meta.fields, "copies_withdrawn", "copies_not_changeable"]
        read_only_fields = fields

    def get_copies_withdrawn(self, obj) -> int:
        return self.context["outcome"].copies_withdrawn

    def get_copies_not_changeable(self, obj) -> int:
        return self.context["outcome"].copies_not_changeable


class WithdrawnSinceRunSerializer(serializers.Serializer):
    """The withdrawals recorded after the latest run finished (settings.json ``scores_stale.withdrawn_since_run``)."""

    participants = serializers.IntegerField()
    answers = serializers.IntegerField(help_text="Answers erased with them.")
    counted_answers = serializers.IntegerField(help_text="Of those, answers that had counted in the run's figures.")


@extend_schema_serializer(component_name="SourceSummary")  # the summary's one row schema, as before
class StudySourceSummarySerializer(SourceSummarySerializer):
    """A per-source summary row and whether its figures still match the answers that count, read
    from the study's ``scores_stale`` (``bundle.export.scores_staleness``, the one owner of the rule
    the bundle's settings.json and ``/results/`` give), handed over as ``context["scores_stale"]``
    (None: nothing scored to be stale)."""

    stale = serializers.SerializerMethodField(help_text=(
        "Some of this source's units are stale: the answers that count for them changed after the run that scored "
        "them finished (a participant withdrew, or work was submitted, rejected, put on hold or cleared since), or, "
        "in a study of imported outcomes, outcomes were imported again after the run read them and that import "
        "changed some (the study's `scores_stale.outcomes_reimported_since_run`), or the run is stale as a whole with "
        "no unit to name (`scores_stale.whole_run_stale`: such a re-import, a bundle copy its bundle called stale at "
        "study level; every source is stale then, as the run's results.json compares them all), so these figures "
        "need the study scored again. Null: nothing scored (no run)."))
    stale_units = serializers.SerializerMethodField(help_text=(
        "How many of this source's units are stale (the `stale` column of GET /api/v1/scores/ lists them); null: "
        "nothing scored."))
    withdrawn_since_run = serializers.SerializerMethodField(help_text=(
        "For the whole study: the withdrawals recorded after the latest run finished, whose answers these figures "
        "still count (as results.json's `scores_stale.withdrawn_since_run` and the bundle's settings.json give "
        "them); null: nothing scored."))

    def _stale(self) -> dict | None:
        return self.context.get("scores_stale")

    def get_stale_units(self, row) -> int | None:
        stale = self._stale()
        if stale is None:
            return None
        return sum(1 for unit in stale["units"] if unit["source"] == row["source_name"])

    def get_stale(self, row) -> bool | None:
        n = self.get_stale_units(row)
        if n is None:
            return None
        # stale as a whole with no unit to name (outcomes imported again, a copy its bundle called stale
        # at study level...): every source is
        return n > 0 or bool(self._stale().get("whole_run_stale"))

    @extend_schema_field(WithdrawnSinceRunSerializer(allow_null=True))
    def get_withdrawn_since_run(self, row) -> dict | None:
        stale = self._stale()
        return stale["withdrawn_since_run"] if stale is not None else None
