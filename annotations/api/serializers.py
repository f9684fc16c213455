"""Serializers of the annotations API. Worker ids are pseudonyms; ``worker_raw_id`` is present only
when a permitted staff user asks with ``include_raw_worker_ids=true``."""
from __future__ import annotations

from rest_framework import serializers

from annotations.models import Annotation, Assignment
from lab.pseudonyms import PseudonymCache


class _WorkerMixin(serializers.Serializer):
    worker = serializers.SerializerMethodField(help_text="Pseudonymised worker id (HMAC-SHA256, keyed).")

    def _participant(self, obj):
        raise NotImplementedError

    def _cache(self) -> PseudonymCache:
        cache = self.context.get("pseudonyms")
        if cache is None:
            cache = self.context["pseudonyms"] = PseudonymCache()
        return cache

    def get_worker(self, obj) -> str:
        p = self._participant(obj)
        return self._cache().get(p.pk, p.platform, p.external_id)

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if not self.context.get("raw_worker_ids"):
            data.pop("worker_raw_id", None)
        return data


RAW_ID_HELP = (
    "Raw platform id: present only with include_raw_worker_ids=true for staff with the "
    "studies.view_raw_worker_ids permission."
)


class AssignmentSerializer(_WorkerMixin, serializers.ModelSerializer):
    # Not read_only so that the schema lists it as optional (it is absent unless asked for).
    worker_raw_id = serializers.CharField(source="participant.external_id", required=False, help_text=RAW_ID_HELP)
    platform = serializers.CharField(source="participant.platform", read_only=True)
    n_units = serializers.IntegerField(read_only=True, help_text="Units and attention checks in the task.")
    n_completed = serializers.IntegerField(read_only=True, help_text="Of those, how many are answered.")
    on_hold = serializers.BooleanField(read_only=True, help_text=(
        "Sync held the task (`annotations.selectors.on_hold`: the platform's worker is not the participant who "
        "answered, the platform does not list the work, or lists it in another state) and no researcher has "
        "cleared it: its answers are not scored, approved or paid until one decides, whatever its `status`."))

    class Meta:
        model = Assignment
        fields = [
            "id", "study", "worker", "worker_raw_id", "platform", "status", "platform_assignment_id",
            "platform_task_id", "consented_at", "created_at", "expires_at", "submitted_at", "reviewed_at", "n_units",
            "n_completed", "on_hold",
        ]
        read_only_fields = ["study"]  # output only: writable, a form would list every study

    def _participant(self, obj):
        return obj.participant


class AnnotationSerializer(_WorkerMixin, serializers.ModelSerializer):
    worker_raw_id = serializers.CharField(
        source="claim.participant.external_id", required=False, help_text=RAW_ID_HELP
    )
    study = serializers.IntegerField(source="claim.study_id", read_only=True)
    assignment = serializers.IntegerField(source="claim.assignment_id", read_only=True)
    position = serializers.IntegerField(source="claim.position", read_only=True)
    unit = serializers.IntegerField(source="claim.unit_id", read_only=True, allow_null=True)
    item = serializers.IntegerField(source="claim.unit.item_id", read_only=True, allow_null=True, default=None)
    source = serializers.IntegerField(source="claim.unit.source_id", read_only=True, allow_null=True, default=None)
    source_name = serializers.CharField(
        source="claim.unit.source.name", read_only=True, allow_null=True, default=None
    )
    generalization_question = serializers.IntegerField(
        source="claim.unit.generalization_question_id", read_only=True, allow_null=True, default=None
    )
    attention_check = serializers.IntegerField(source="claim.attention_check_id", read_only=True, allow_null=True)
    counts = serializers.BooleanField(read_only=True, help_text=(
        "Scoring reads this answer, as the export's `counts` column says (`annotations.selectors.claim_scored`): "
        "its question is complete, not given back, its task submitted or approved and not on hold, and in a "
        "generalization study its question is not marked invalid. As it is now, not as last scored."))

    class Meta:
        model = Annotation
        fields = [
            "id", "study", "assignment", "worker", "worker_raw_id", "position", "unit", "item", "source",
            "source_name", "generalization_question", "attention_check", "step", "answer", "payload", "shown_at",
            "answered_at", "duration_ms", "counts",
        ]

    def _participant(self, obj):
        return obj.claim.participant
