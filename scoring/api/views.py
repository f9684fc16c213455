"""Unit scores (per (item, source) utility, Gen-U, similarity) and scoring jobs."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from lab.api.serializers import RejectUnknownFieldsMixin
from scoring.models import ScoreRun, UnitScore
from scoring.services import ScoringQueueUnavailable, score_run_enqueue
from scoring.services.runs import ScoreRunRefused, already_being_scored
from studies.api.serializers import ErrorSerializer
from studies.selectors import studies_for_user

from .filters import ScoreRunFilter, UnitScoreFilter
from .serializers import ScoreRunSerializer, UnitScoreSerializer

UNIT_SCORE_EXAMPLE = OpenApiExample(
    "A useful rationale",
    value={
        "id": 9, "study": 3, "item": 52, "item_external_id": "7d2a8cbb", "split": "test", "source": 4,
        "source_name": "gpt3", "gold_answer": "yes", "n_annotators": 5, "before_majority": "no",
        "after_majority": "yes", "before_tie": False, "after_tie": False, "before_correct": False,
        "after_correct": True, "utility": 1, "utility_label": "useful", "task_correct": True, "gen_u": 1,
        "similarity": 0.41, "imported": False, "updated_at": "2026-11-30T12:00:00Z",
    },
    response_only=True,
)
SCORE_RUN_EXAMPLE = OpenApiExample(
    "A finished scoring run",
    value={
        "id": 5, "study": 3, "status": "done", "has_results": True, "warnings": [], "error": "",
        "task_id": "c0a1f1d6-...", "created_at": "2026-11-30T12:00:00Z", "finished_at": "2026-11-30T12:00:07Z",
    },
    response_only=True,
)


@extend_schema_view(
    list=extend_schema(
        summary="List unit scores",
        description=(
            "One row per scored (study, item, source) unit of the studies you can see: the majority answers "
            "before and after the rationale (ties count as wrong and are flagged), utility (1 useful, 0 unsure, "
            "-1 not useful), task accuracy of the source, Gen-U and similarity; then what the row's own scoring run "
            "computed them with, as the unit-score export's columns of the same names give it: the run, its "
            "settings, whether the scores are stale, the majority rule, and which answers it counted "
            "(`counted_answers`, `counted_tasks_failing_a_check`: counted tasks that failed an attention check, "
            "`other_readings`: the figures without them). Filter by study, source (id or name), split and utility "
            "category."
        ),
        examples=[UNIT_SCORE_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One unit score", description="One scored unit.", examples=[UNIT_SCORE_EXAMPLE]),
)
class UnitScoreViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = UnitScoreSerializer
    filterset_class = UnitScoreFilter
    ordering_fields = ["id", "updated_at"]

    def get_queryset(self):
        return UnitScore.objects.filter(study__in=studies_for_user(user=self.request.user)).select_related("item", "source")


class ScoreRunStartSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """What ``POST /api/v1/score-runs/`` accepts; any other key is a 400 naming it."""

    resource_serializer = ScoreRunSerializer

    study = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="Id of the study to score.")


class ScoreRunAlreadyQueuedSerializer(ScoreRunSerializer):
    """The answer to a start asked while the requester's own run of the study is pending (not yet started)."""

    detail = serializers.SerializerMethodField(help_text="Says that the study is already being scored and no "
                                                         "second run was started.")

    class Meta(ScoreRunSerializer.Meta):
        fields = [*ScoreRunSerializer.Meta.fields, "detail"]

    def get_detail(self, obj) -> str:
        return already_being_scored(obj)


@extend_schema_view(
    list=extend_schema(
        summary="List scoring runs",
        description="Scoring jobs of the studies you can see, newest last; `status` is pending, running, done or failed.",
        examples=[SCORE_RUN_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="Scoring job progress",
        description=(
            "Poll this until `status` is `done` (then read `/api/v1/studies/{id}/results/`) or `failed` "
            "(`error` says why)."
        ),
        examples=[SCORE_RUN_EXAMPLE],
    ),
    create=extend_schema(
        summary="Start scoring a study",
        description=(
            "Queue a scoring job for the study (aggregation, utility, agreement, Theil's U, results.json). "
            "Answers 202 with the job; poll it with GET. A job is not queued twice for the same requester: while "
            "your own job for the study is queued and not yet started, 200 with that job, `detail` saying so; "
            "another user's queued job is not joined (it acts for them, and would be lost with their access): "
            "202 with a job of your own. A running job read the answers already: a new one is queued, and "
            "supersedes it. Needs a read-write token "
            "and the permission `scoring.add_scorerun`. 400 names a missing field; 404 for a study you cannot see."
        ),
        request=ScoreRunStartSerializer,
        responses={
            202: ScoreRunSerializer,
            200: OpenApiResponse(ScoreRunAlreadyQueuedSerializer, description="The study is already being scored: "
                                 "its pending or running job; nothing new was queued."),
            400: OpenApiResponse(ErrorSerializer, description="Bad input, naming the field."),
            404: OpenApiResponse(ErrorSerializer, description="No such study (or not visible to you)."),
            503: OpenApiResponse(ErrorSerializer, description="The task queue cannot be reached; nothing was "
                                 "queued and the run is marked failed. Try again later."),
        },
        examples=[OpenApiExample("Score study 3", value={"study": 3}, request_only=True), SCORE_RUN_EXAMPLE],
    ),
)
class ScoreRunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ScoreRunSerializer
    filterset_class = ScoreRunFilter
    ordering_fields = ["id", "created_at"]
    write_permissions = {"create": "scoring.add_scorerun"}

    def get_queryset(self):
        return ScoreRun.objects.filter(study__in=studies_for_user(user=self.request.user))

    def create(self, request, *args, **kwargs):
        data = ScoreRunStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        study = studies_for_user(user=request.user).filter(pk=data.validated_data["study"]).first()
        if study is None:
            return Response(
                {"detail": f"study: no study with id {data.validated_data['study']} that you can see."},
                status=status.HTTP_404_NOT_FOUND,
            )
        try:
            run = score_run_enqueue(study=study, user=request.user)
        except ScoreRunRefused as exc:  # the service's own check (the permission is checked above too)
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except ScoringQueueUnavailable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        if run.already_queued:
            return Response(ScoreRunAlreadyQueuedSerializer(run, context={"request": request}).data,
                            status=status.HTTP_200_OK)
        return Response(ScoreRunSerializer(run, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)
