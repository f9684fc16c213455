"""Read endpoints of assignments (workers' tasks) and annotations (each step's answer)."""
from __future__ import annotations

from django.db.models import BooleanField, Count, ExpressionWrapper, Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets

from annotations.models import Annotation, Assignment
from annotations.selectors import claim_scored, on_hold
from studies.api.access import RAW_WORKER_IDS_PARAM, wants_raw_worker_ids
from studies.selectors import studies_for_user

from .filters import AnnotationFilter, AssignmentFilter
from .serializers import AnnotationSerializer, AssignmentSerializer

RAW_IDS_PARAMETER = OpenApiParameter(
    RAW_WORKER_IDS_PARAM, OpenApiTypes.BOOL, description=(
        "Add `worker_raw_id` (the platform's id). Staff with the permission "
        "`studies.view_raw_worker_ids` only; anyone else gets 403."
    ),
)

ANNOTATION_EXAMPLE = OpenApiExample(
    "An answer before the rationale",
    value={
        "id": 1041, "study": 3, "assignment": 87, "worker": "w_3f9c2a71be04d6e8", "position": 2, "unit": 311,
        "item": 52, "source": 4, "source_name": "gpt3", "generalization_question": None, "attention_check": None,
        "step": "before", "answer": "no", "payload": {}, "shown_at": "2026-11-30T10:02:11Z",
        "answered_at": "2026-11-30T10:02:19Z", "duration_ms": 8120, "counts": True,
    },
    response_only=True,
)
ASSIGNMENT_EXAMPLE = OpenApiExample(
    "A submitted task",
    value={
        "id": 87, "study": 3, "worker": "w_3f9c2a71be04d6e8", "platform": "prolific", "status": "submitted",
        "platform_assignment_id": "5f1e...", "platform_task_id": "65aa...", "consented_at": "2026-11-30T10:00:02Z",
        "created_at": "2026-11-30T10:00:00Z", "expires_at": "2026-11-30T11:00:00Z",
        "submitted_at": "2026-11-30T10:09:40Z", "reviewed_at": None, "n_units": 11, "n_completed": 11,
        "on_hold": False,
    },
    response_only=True,
)


class _WorkerContextMixin:
    extra_query_params = (RAW_WORKER_IDS_PARAM,)  # read by get_serializer_context, not a filter

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["raw_worker_ids"] = wants_raw_worker_ids(self.request)
        return context


@extend_schema_view(
    list=extend_schema(
        summary="List assignments",
        description=(
            "Workers' tasks in the studies you can see, oldest first (by id; ordered by `created_at`, tasks started "
            "in the same second come in id order), with cursor pagination. Filter by study, status, worker "
            "pseudonym and start date. Worker ids are pseudonyms. `on_hold`: sync held the task "
            "and no researcher cleared it, so its answers are not scored, approved or paid whatever its `status`. "
            "Tasks of a withdrawn participant (status `withdrawn`) are never listed: emptied by the withdrawal, "
            "they are kept only as payment records, and `?status=withdrawn` is a 400."
        ),
        parameters=[RAW_IDS_PARAMETER],
        examples=[ASSIGNMENT_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="One assignment",
        description="One worker's task. 404 when its study is not yours or shared with you.",
        parameters=[RAW_IDS_PARAMETER],
        examples=[ASSIGNMENT_EXAMPLE],
    ),
)
class AssignmentViewSet(_WorkerContextMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = AssignmentSerializer
    filterset_class = AssignmentFilter
    ordering_fields = ["id", "created_at"]

    def get_queryset(self):
        return (
            Assignment.objects.filter(study__in=studies_for_user(user=self.request.user))
            .exclude(status=Assignment.Status.WITHDRAWN)  # emptied, kept only for the payment audit
            .select_related("participant")
            .annotate(
                n_units=Count("claims", distinct=True),
                n_completed=Count("claims", filter=Q(claims__completed_at__isnull=False), distinct=True),
                on_hold=on_hold(),
            )
        )


@extend_schema_view(
    list=extend_schema(
        summary="List annotations",
        description=(
            "Every recorded answer (one row per step: `before` without the rationale, `after` with it, "
            "`validation`, `properties`, `attention`) with its timings, in the studies you can see. Cursor "
            "pagination ordered by id (or `answered_at`, answers of the same instant in id order) stays correct "
            "while answers arrive: follow `next` until it is null. Filter by study, source (id or name), split, step, worker pseudonym, utility category "
            "of the unit (after scoring) and date. `counts`: scoring reads the answer (the export's `counts`): "
            "answers of held, active, given-back or rejected tasks, and in a generalization study those to a "
            "question marked invalid, are listed with `counts` false. For a whole study use the streamed export "
            "instead."
        ),
        parameters=[RAW_IDS_PARAMETER],
        examples=[ANNOTATION_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="One annotation",
        description="One recorded answer. 404 when its study is not yours or shared with you.",
        parameters=[RAW_IDS_PARAMETER],
        examples=[ANNOTATION_EXAMPLE],
    ),
)
class AnnotationViewSet(_WorkerContextMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = AnnotationSerializer
    filterset_class = AnnotationFilter
    ordering_fields = ["id", "answered_at"]

    def get_queryset(self):
        return (
            Annotation.objects.filter(claim__study__in=studies_for_user(user=self.request.user))
            .select_related("claim__participant", "claim__unit__source")
            .annotate(counts=ExpressionWrapper(claim_scored("claim__"), output_field=BooleanField()))
        )
