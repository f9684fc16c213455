"""Serializers of the cockpit's own endpoints (the study's withdrawals)."""
from __future__ import annotations

from rest_framework import serializers

from annotations.models import Withdrawal


class WithdrawalRequestSerializer(serializers.Serializer):
    """Who to withdraw: exactly one of the three (the service refuses none or two)."""

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
