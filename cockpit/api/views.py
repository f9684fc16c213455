"""The API where the apps meet: studies (their design from ``studies``, progress from
``annotations``, results and streamed exports from ``scoring``) and the answers list filtered by
their unit's score. Each app's own endpoints live in its ``api`` package; this one only composes.

Authentication, permissions, pagination and throttling are the ``REST_FRAMEWORK`` defaults; every
study is reached through ``studies.selectors.studies_for_user`` (404 for one the user may not see)."""
from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.settings import api_settings

from annotations.api.views import AnnotationViewSet as AnswersViewSet
from annotations.models import Annotation, Unit, Withdrawal
from annotations.selectors import claim_scored
from annotations.selectors.cost import study_cost_and_pay
from annotations.services.platforms.access import PlatformAccessDenied
from annotations.services.withdrawal import ParticipantNotFound, WithdrawalError, participant_withdraw
from cockpit.api.serializers import (
    StudySourceSummarySerializer,
    WithdrawalOutcomeSerializer,
    WithdrawalRequestSerializer,
    WithdrawalSerializer,
)
from lab.api.counts import correlated_count
from lab.api.filters import accepted_query_params, reject_unknown_query_params
from lab.api.serializers import RejectUnknownFieldsMixin
from lab.api.streaming import EXPORT_RENDERERS, FORMATS, columns_markdown, streaming_export_response
from lab.ids import parse_id
from scoring.api.export_annotations import annotation_columns, annotation_rows
from scoring.api.export_units import SCORE_COLUMNS, score_rows, source_summaries
from scoring.api.filters import ScoredAnnotationFilter, UnitScoreFilter
from scoring.metrics.labels import UTILITY_CHOICES
from scoring.models import UnitScore
from scoring.selectors import results_for_reader, score_run_latest
from scoring.services.bundle import BundleError, bundle_filename, bundle_import, bundle_stream
from scoring.services.bundle.export import scores_staleness
from studies.api.access import RAW_WORKER_IDS_PARAM, wants_raw_worker_ids
from studies.api.filters import StudyFilter
from studies.api.serializers import ErrorSerializer, StudyDesignSerializer, StudySerializer
from studies.models import Platform, Split, Study, StudyShare
from studies.selectors import studies_for_user
from studies.services.sharing import study_share
from studies.services.studies import StudyError, study_create

NOT_FOUND = OpenApiResponse(ErrorSerializer, description="Not found, or not visible to you.")
BAD_REQUEST = OpenApiResponse(description="Bad input: the body names each field and what is wrong with it.")


WITHDRAWAL_EXAMPLE = OpenApiExample("A withdrawal's record", response_only=True, value={
    "id": 4, "study": 3, "withdrawn_by": "dana", "withdrawn_at": "2026-12-01T09:30:00Z",
    "last_applied_at": "2026-12-01T09:30:00Z", "n_answers": 22, "n_counted_answers": 22, "n_tasks": 1})


class ValidationFailed(ValidationError):
    """400 with a body naming the field(s)."""


class ExportContentNegotiation(DefaultContentNegotiation):
    """An export's file type is its ``file_format``; DRF's ``format`` (``?format=json``) picks no
    renderer for it: read as one, ``?format=api`` was a 404 (no such renderer) that
    looked like a study the caller may not see, and ``?format=json`` a CSV. With it the response is
    JSON, and the action answers 400 once the study is found (``StudyViewSet._file_format``)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        override = self.settings.URL_FORMAT_OVERRIDE
        if override and override in request.query_params:
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)


class BundleImportFormSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """The form of ``POST /api/v1/studies/import-bundle/`` as the browsable API draws it (the action
    reads the multipart upload itself): a file and a name, nothing listing rows of the server."""

    file = serializers.FileField(help_text="A bundle (.zip) from GET /api/v1/studies/<id>/bundle/.")
    name = serializers.CharField(max_length=200, required=False, allow_blank=True,
                                 help_text="The new study's name.")


def study_create_from_design(*, design: dict, user) -> Study:
    """Create a study owned by ``user`` through ``study_create`` and share it (``study_share``, at
    the design's ``share_level``); one transaction, so a failure leaves nothing behind."""
    shared_with = design.pop("shared_with", [])
    level = design.pop("share_level", StudyShare.Level.VIEW)
    try:
        with transaction.atomic():
            study = study_create(owner=user, user=user, **design)
            for other in shared_with:
                study_share(study=study, user=user, with_user=other, level=level)
    except StudyError as exc:
        raise ValidationFailed({field: [reason] for field, reason in exc.problems.items()}
                               or {"non_field_errors": [str(exc)]}) from exc
    return study


ANNOTATION_EXPORT_DESCRIPTION = (
    "Stream every recorded answer of the study as CSV, JSON lines or Parquet (one row per answered "
    "step), with the unit's scores joined. Memory stays constant whatever the size; Parquet comes in "
    "row groups of 50,000 rows. Worker ids are pseudonyms (`w_` + 16 hex of HMAC-SHA256 keyed by the "
    "deployment's salt): stable within this deployment. Filters as on `/api/v1/annotations/`. The column "
    "set is stable (new columns are only ever appended):\n\n" + columns_markdown(annotation_columns(raw_worker_ids=True))
)
SCORE_EXPORT_DESCRIPTION = (
    "Stream the study's unit scores (one row per scored (item, source) unit) as CSV, JSON lines or "
    "Parquet. Filters as on `/api/v1/scores/`. Stable columns:\n\n" + columns_markdown(SCORE_COLUMNS)
)
FORMAT_PARAMETER = OpenApiParameter(
    "file_format", OpenApiTypes.STR, enum=list(FORMATS), default="csv", description="csv, jsonl or parquet."
)
# DRF's ``format`` is a 400 on an export (``StudyViewSet._file_format``): not documented as a choice.
DRF_FORMAT_PARAMETER = OpenApiParameter(api_settings.URL_FORMAT_OVERRIDE or "format", exclude=True)
EXPORT_RESPONSES = {
    (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV with a header row (UTF-8)."),
    (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="One JSON object per line."),
    (200, "application/vnd.apache.parquet"): OpenApiResponse(OpenApiTypes.BINARY, description="A Parquet file."),
    (400, "application/json"): BAD_REQUEST,
    (403, "application/json"): OpenApiResponse(ErrorSerializer, description="Raw worker ids asked without permission."),
    (404, "application/json"): NOT_FOUND,
}


def _choice_param(name, choices, description):
    return OpenApiParameter(name, OpenApiTypes.STR, enum=[c[0] for c in choices], description=description)


ANNOTATION_EXPORT_PARAMETERS = [
    FORMAT_PARAMETER,
    DRF_FORMAT_PARAMETER,
    OpenApiParameter("source", OpenApiTypes.STR, description="Only this rationale source (id or name)."),
    _choice_param("split", Split.choices, "Only items of this split."),
    _choice_param("step", Annotation.Step.choices, "Only this step."),
    _choice_param("utility", UTILITY_CHOICES, "Only units of this utility category."),
    OpenApiParameter("worker", OpenApiTypes.STR, description="Only this worker pseudonym (comma-separated for several)."),
    OpenApiParameter("answered_after", OpenApiTypes.DATETIME, description="Answers recorded at or after this time."),
    OpenApiParameter("answered_before", OpenApiTypes.DATETIME, description="Answers recorded before this time."),
    OpenApiParameter("date", OpenApiTypes.DATE, description="Answers recorded on this day (UTC)."),
    OpenApiParameter("item", OpenApiTypes.INT, description="Only this item (id)."),
    OpenApiParameter("assignment", OpenApiTypes.INT, description="Only this task (assignment id)."),
    OpenApiParameter(
        RAW_WORKER_IDS_PARAM, OpenApiTypes.BOOL,
        description="Append `worker_raw_id`; staff with `studies.view_raw_worker_ids` only (403 otherwise).",
    ),
]
SCORE_EXPORT_PARAMETERS = [
    FORMAT_PARAMETER,
    DRF_FORMAT_PARAMETER,
    OpenApiParameter("source", OpenApiTypes.STR, description="Only this rationale source (id or name)."),
    _choice_param("split", Split.choices, "Only items of this split."),
    _choice_param("utility", UTILITY_CHOICES, "Only units of this utility category."),
    OpenApiParameter("item", OpenApiTypes.INT, description="Only this item (id)."),
    OpenApiParameter("task_correct", OpenApiTypes.BOOL, description="Only units whose source's predicted answer is "
                     "right (true) or wrong (false)."),
    OpenApiParameter("gen_u", OpenApiTypes.NUMBER, description="Only units with this Gen-U score."),
    OpenApiParameter("before_tie", OpenApiTypes.BOOL, description="Only units whose before-answers tied (or not)."),
    OpenApiParameter("after_tie", OpenApiTypes.BOOL, description="Only units whose after-answers tied (or not)."),
    OpenApiParameter("updated_after", OpenApiTypes.DATETIME, description="Scores stored at or after this time."),
    OpenApiParameter("updated_before", OpenApiTypes.DATETIME, description="Scores stored before this time."),
]
STUDY_EXAMPLE = OpenApiExample("A utility study", response_only=True, value={
    "id": 3, "name": "strategyqa-utility", "kind": "utility", "status": "closed", "dataset": 1, "split": "test",
    "item_sample_size": None, "sample_seed": 0, "sources": [4, 5, 6], "annotators_per_unit": 5,
    "units_per_task": 10, "reward": "2.00", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "6.0",
    "platform": "prolific", "consent_text": "", "instructions": "", "example": "", "faithfulness_enabled": False,
    "stop_when_decided": False, "is_imported_outcome": False, "owner": "dana", "shared_with": ["lee"], "n_items": 458, "n_units": 1374,
    "n_units_complete": 1374, "n_annotations": 13740, "created_at": "2026-11-30T09:00:00Z",
    "updated_at": "2026-11-30T09:00:00Z", "shares": [{"username": "lee", "level": "view"}]})
DESIGN_EXAMPLE = OpenApiExample("A study design", request_only=True, value={
    "name": "strategyqa-utility-pilot", "kind": "utility", "dataset": "strategyqa", "split": "test",
    "item_sample_size": 50, "sample_seed": 1, "sources": ["gpt3", "t5large"], "annotators_per_unit": 5,
    "units_per_task": 10, "reward": "2.50", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "8.0",
    "platform": "prolific", "instructions": "Answer, read the explanation, answer again.", "shared_with": ["lee"],
    "share_level": "view"})




@extend_schema_view(
    list=extend_schema(
        summary="List studies",
        description=(
            "The studies you own and those shared with you (superusers see all), with progress counts. "
            "Filter by kind, status, dataset, split, source, creation date; `mine=true` for your own."
        ),
        examples=[STUDY_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="One study",
        description="One study's design and progress. 404 when the study is not yours or shared with you.",
        examples=[STUDY_EXAMPLE],
    ),
    create=extend_schema(
        summary="Create a study from a JSON design",
        description=(
            "Creates a draft study owned by you from a design: dataset and sources by name, split, sample, "
            "annotators per unit, units per task, pay. The items are drawn and the units built by the study "
            "service. Needs a read-write token and the permission `studies.add_study`. 400 names each bad field. "
            "`shared_with` shares it with those researchers at `share_level` (default view: read only; change: also "
            "its design and content; pay: also publish it and move money)."
        ),
        request=StudyDesignSerializer,
        responses={201: StudySerializer, 400: OpenApiTypes.OBJECT},
        examples=[DESIGN_EXAMPLE, STUDY_EXAMPLE],
    ),
)
class StudyViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = StudySerializer
    filterset_class = StudyFilter
    ordering_fields = ["id", "created_at", "name"]
    write_permissions = {"create": "studies.add_study", "withdrawals": "studies.change_study",
                         "import_bundle": "studies.add_study"}
    throttle_scope_for_action = {"export_annotations": "api_export", "export_scores": "api_export",
                                 "bundle": "api_export"}

    def get_queryset(self):
        complete = Unit.objects.filter(n_completed__gte=F("quota"))
        return (
            studies_for_user(user=self.request.user)
            .select_related("owner")
            .prefetch_related("shared_with", "shares__user", "sources")
            .annotate(
                n_items=correlated_count(Study.items.through.objects.all(), "study"),
                n_units=correlated_count(Unit.objects.all(), "study"),
                n_units_complete=correlated_count(complete, "study"),
                n_annotations=correlated_count(Annotation.objects.filter(claim_scored("claim__")), "claim__study"),
            )
        )

    # Each write action's input. The browsable API draws a POST form from ``get_serializer_class``:
    # StudySerializer there (output only) drew, on the withdrawals and import-bundle pages, a form
    # whose dataset and sources fields listed every researcher's datasets and sources.
    input_serializers = {"create": StudyDesignSerializer, "withdrawals": WithdrawalRequestSerializer,
                         "import_bundle": BundleImportFormSerializer}

    def get_serializer_class(self):
        return self.input_serializers.get(self.action) or super().get_serializer_class()

    # The query parameters each action on one study reads (beside DRF's ``format``). The study list's
    # filters are not among them: ``results/?source=`` answered the whole results and ``results/?split=``
    # a 404 (the list's filters looked the study up), ``summary/?source=`` every source. A parameter an
    # action does not read is a 400 naming it (``reject_unknown_query_params``), as on every list. The
    # exports check their own filters (``_filtered``) and refuse DRF's ``format`` (``_file_format``).
    detail_query_params = {"retrieve": (), "results": (), "summary": (), "cost": ("platform", "max_assignments_per_hit"),
                           "withdrawals": (), "bundle": ()}

    def filter_queryset(self, queryset):
        accepted = self.detail_query_params.get(self.action)
        if accepted is None:
            return super().filter_queryset(queryset)
        reject_unknown_query_params(params=self.request.query_params,
                                    accepted={*accepted, *filter(None, [api_settings.URL_FORMAT_OVERRIDE])})
        return queryset

    def create(self, request, *args, **kwargs):
        design = StudyDesignSerializer(data=request.data, context=self.get_serializer_context())
        design.is_valid(raise_exception=True)
        study = study_create_from_design(design=dict(design.validated_data), user=request.user)
        study = self.get_queryset().get(pk=study.pk)
        return Response(StudySerializer(study, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The study's results.json",
        description=(
            "The whole `results.json` of the study's latest finished scoring run: per-source utility shares with "
            "intervals, ties, agreement (Krippendorff's alpha, Fleiss' kappa), Theil's U and eta, Gen-U. "
            "A Gen-U answerer whose fine-tuned source the caller may not read (it was scored with the study "
            "owner's rights) keeps its model and says why its settings are withheld (`gen_u.answerers`). "
            "Beside the run's own keys, `scores_stale` says whether these figures still match the answers that "
            "count, as the study bundle's settings.json gives it: `stale` (true: the answers that count for "
            "`stale_units` of the `scored_units` units changed after the run began reading them (`run.read_at`), so score the study again "
            "before publishing these numbers), `withdrawn_since_run` (participants, answers and counted answers "
            "withdrawn since the run; they are still in these figures), `outcomes_reimported_since_run` (a study "
            "of imported outcomes: the latest outcomes import after the run began reading them that created, "
            "updated or removed rows, with its file, time and counts, which makes the run stale; null when none: "
            "a re-import of the same file changes nothing), `units` (item_id and source of each stale "
            "unit), `rule`, `note`, `score_run` and `finished_at`. "
            "404 until a scoring run has finished (start one with `POST /api/v1/score-runs/`)."
        ),
        responses={200: OpenApiTypes.OBJECT, 404: NOT_FOUND},
        examples=[OpenApiExample(
            "results.json (abridged; illustrative values, not the released data)", response_only=True,
            description="Illustrative values, not the released data; the keys are results.json's own.",
            value={
                "study": {"id": 3, "name": "strategyqa-utility"},
                "utility_shares": {"gpt3": {"n": 458, "useful": 0.21, "unsure": 0.45, "not_useful": 0.34}},
                "theils_u_utility_given_task_accuracy": {"gpt3": 0.111}})],
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def results(self, request, pk=None):
        study = self.get_object()
        run = score_run_latest(study=study)
        if run is None:
            return Response(
                {"detail": "This study has no finished scoring run yet: start one with POST /api/v1/score-runs/."},
                status=status.HTTP_404_NOT_FOUND,
            )
        return Response({**results_for_reader(run, user=request.user),
                         "scores_stale": scores_staleness(study, run, user=request.user)})

    @extend_schema(
        summary="Per-source summary",
        description=(
            "Per rationale source, from the stored unit scores: numbers and shares of useful / unsure / not "
            "useful units, majority ties before and after, accuracies before and after the rationale, task "
            "accuracy of the source, mean Gen-U and similarity, and what they were computed with: the scoring "
            "run, the similarity model, the Gen-U method and the majority rule (the run's own, as its "
            "results.json majority_readings records it; with three or more choices a strict majority gives "
            "other utilities). `stale` and `stale_units` say whether, and for how many of the source's units, the "
            "answers that count changed after that run finished (a participant withdrew: `withdrawn_since_run`, "
            "the study's, as /results/ `scores_stale` and the bundle's settings.json give it); in a study of "
            "imported outcomes every source is `stale` when outcomes were imported again after that run read them "
            "and that import changed some (/results/ `scores_stale.outcomes_reimported_since_run`): score the study "
            "again before publishing them."
        ),
        responses={200: StudySourceSummarySerializer(many=True), 404: NOT_FOUND},
        examples=[OpenApiExample("One source (illustrative values, not the released data)", response_only=True,
                                 description="Illustrative values, not the released data.", value=[{
            "source": 4, "source_name": "gpt3", "n_units": 458, "n_scored": 458, "n_useful": 96, "n_unsure": 206,
            "n_not_useful": 156, "share_useful": 0.209607, "share_unsure": 0.449782, "share_not_useful": 0.340611,
            "n_before_ties": 0, "n_after_ties": 0, "accuracy_before": 0.61, "accuracy_after": 0.66,
            "n_task_known": 458, "task_accuracy": 0.74, "mean_gen_u": None, "mean_similarity": None, "score_run": 12,
            "similarity_model": None, "gen_u_method": None,
            "majority_rule": "plurality (the label more annotators gave than any other; our reading of SPEC section 2); "
                             "a tie is no majority answer and counts as wrong; results.json majority_readings gives "
                             "strict_majority beside it",
            "stale": False, "stale_units": 0,
            "withdrawn_since_run": {"participants": 0, "answers": 0, "counted_answers": 0}}])],
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def summary(self, request, pk=None):
        study = self.get_object()
        stale = scores_staleness(study, score_run_latest(study=study), user=request.user)
        return Response(StudySourceSummarySerializer(source_summaries(study=study, user=request.user), many=True,
                                                     context={"scores_stale": stale}).data)

    @extend_schema(
        summary="What the study costs and pays",
        description=(
            "The one cost-and-pay reading that the study page, the publish page and `publish_study --dry-run` "
            "quote: tasks, rewards, the platform's fee (rates from `RL_MTURK_FEE_RATE`, "
            "`RL_MTURK_LARGE_HIT_FEE_RATE`, `RL_PROLIFIC_FEE_RATE`), the total, and the effective hourly pay "
            "(task times from the task's start (the landing page for MTurk and Prolific arrivals, as the platform times them; the consent for links) to submission once enough tasks are timed, the estimate before)."
        ),
        parameters=[
            _choice_param("platform", Platform.choices, "The platform to price (default: the study's)."),
            OpenApiParameter("max_assignments_per_hit", OpenApiTypes.INT,
                             description="MTurk: assignments per HIT (default RL_MTURK_MAX_ASSIGNMENTS_PER_HIT)."),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: BAD_REQUEST, 404: NOT_FOUND},
        examples=[OpenApiExample("14 tasks on Prolific", response_only=True, value={
            "study": 3, "platform": "prolific", "answers": 40, "tasks": 14, "largest_task": 3,
            "assignments_per_hit": 9,
            "currency": "GBP", "n_tasks": 14, "reward_per_task": "2.00", "rewards": "28.00", "fee_rate": "0.3333",
            "fees": "9.33", "total": "37.33", "notes": ["Prolific service fee taken as 0.3333 of rewards."],
            "hourly_pay": {"figure": "12.00", "basis": "recorded", "text": "Median of 5 paid or payable tasks: 10.0 min a task; 58.0 s a question (median of the questions' recorded step times).",
                           "timed_tasks": 5, "median_minutes": 10.0, "seconds_per_question": 58.0,
                           "floor": "15.00", "below_floor": True, "warnings": []},
            "warnings": ["Effective pay 12.00/h is below the floor of 15.00/h: raise the reward to at least 2.50 "
                         "or pay the difference as a bonus."]})],
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def cost(self, request, pk=None):
        study = self.get_object()
        platform = request.query_params.get("platform") or study.platform
        if platform not in Platform.values:
            raise ValidationFailed({"platform": [f"{platform!r} is not one of {', '.join(Platform.values)}."]})
        raw = request.query_params.get("max_assignments_per_hit") or ""
        per_hit = parse_id(raw, maximum=1_000_000) if raw else None
        if raw and not per_hit:
            raise ValidationFailed({"max_assignments_per_hit": [f"{raw!r} is not a whole number from 1 to 1000000."]})
        cost = study_cost_and_pay(study=study, platform_name=platform, max_assignments_per_hit=per_hit)
        return Response(cost.as_dict())

    def _file_format(self, request) -> str:
        """The export's file type, from ``file_format`` (csv by default). DRF's ``format`` query
        parameter is a 400 naming ``file_format``: it chose no file type, so
        ``?format=json`` gave a CSV (``ExportContentNegotiation``)."""
        override = api_settings.URL_FORMAT_OVERRIDE
        if override and override in request.query_params:
            given = request.query_params[override]
            raise ValidationFailed({override: [
                f"An export does not read {override!r} ({given!r}): give the "
                f"file type as 'file_format', one of {', '.join(FORMATS)} (csv without it)."]})
        value = request.query_params.get("file_format", "csv").strip().lower()
        if value not in FORMATS:
            raise ValidationFailed({"file_format": [f"{value!r} is not one of {', '.join(FORMATS)}."]})
        return value

    def _filtered(self, request, filterset_class, queryset, *, extra=()):
        """``queryset`` (already limited to the study) filtered by the query string; 400 naming the bad
        filters, and any parameter that is neither a filter, ``file_format`` nor one of ``extra`` (an
        export that ignored one would be the whole study). ``study`` is one: the export is the URL's."""
        accepted = accepted_query_params(self, filterset_class=filterset_class, extra=("file_format", *extra))
        reject_unknown_query_params(params=request.query_params,
                                    accepted=accepted - {"study", api_settings.URL_FORMAT_OVERRIDE})
        filterset = filterset_class(request.query_params, queryset=queryset, request=request)
        if not filterset.is_valid():
            raise ValidationFailed(filterset.errors)
        return filterset.qs

    @extend_schema(
        summary="Export annotations (CSV / JSON lines / Parquet)",
        description=ANNOTATION_EXPORT_DESCRIPTION,
        parameters=ANNOTATION_EXPORT_PARAMETERS,
        responses=EXPORT_RESPONSES,
    )
    @action(
        detail=True, methods=["get"], url_path="export/annotations", renderer_classes=EXPORT_RENDERERS,
        content_negotiation_class=ExportContentNegotiation, pagination_class=None, filter_backends=[],
    )
    def export_annotations(self, request, pk=None):
        study = self.get_object()
        file_format = self._file_format(request)
        raw = wants_raw_worker_ids(request)
        annotations = self._filtered(request, ScoredAnnotationFilter, Annotation.objects.filter(claim__study=study),
                                     extra=(RAW_WORKER_IDS_PARAM,))
        rows = annotation_rows(annotations, study=study, user=request.user, raw_worker_ids=raw)
        return streaming_export_response(
            columns=annotation_columns(raw_worker_ids=raw), rows=rows, file_format=file_format,
            filename=f"study-{study.pk}-annotations",
        )

    @extend_schema(
        summary="Export unit scores (CSV / JSON lines / Parquet)",
        description=SCORE_EXPORT_DESCRIPTION,
        parameters=SCORE_EXPORT_PARAMETERS,
        responses=EXPORT_RESPONSES,
    )
    @action(
        detail=True, methods=["get"], url_path="export/scores", renderer_classes=EXPORT_RENDERERS,
        content_negotiation_class=ExportContentNegotiation, pagination_class=None, filter_backends=[],
    )
    def export_scores(self, request, pk=None):
        study = self.get_object()
        file_format = self._file_format(request)
        scores = self._filtered(request, UnitScoreFilter, UnitScore.objects.filter(study=study))
        return streaming_export_response(
            columns=SCORE_COLUMNS, rows=score_rows(scores, user=request.user), file_format=file_format,
            filename=f"study-{study.pk}-scores",
        )


    @extend_schema(
        methods=["POST"],
        summary="Withdraw a participant",
        description=(
            "Withdraw one participant from the study and erase their data from it: their answers, timings, flags "
            "and platform references; their tasks end and their questions go back to the pool while the study is "
            "open. Name them by exactly one of `pseudonym` (`w_...`), `worker_id` (the platform's id) or "
            "`participant_identifier` (what they typed on a link). Needs change rights on the study. Idempotent: "
            "201 when this call withdrew them, 200 when they were already withdrawn. Money already paid is "
            "untouched. The next score run says how many answers were withdrawn. The copies of this study "
            "imported from its bundle here that hold the participant are withdrawn from too when they are yours "
            "to change (`copies_withdrawn`); `copies_not_changeable` counts the others, which their owners "
            "withdraw there by the pseudonym. In such a copy the participant is also found by the pseudonym "
            "or id that names them in the original."
        ),
        request=WithdrawalRequestSerializer,
        examples=[OpenApiExample("By pseudonym", request_only=True, value={"pseudonym": "w_3f9c2a71be04d6e8"}),
                  OpenApiExample("A withdrawal's record", response_only=True, value={
                      **WITHDRAWAL_EXAMPLE.value, "copies_withdrawn": 1, "copies_not_changeable": 0})],
        responses={200: WithdrawalOutcomeSerializer, 201: WithdrawalOutcomeSerializer, 400: BAD_REQUEST,
                   403: OpenApiResponse(ErrorSerializer, description="No change rights on this study."),
                   404: NOT_FOUND},
    )
    @extend_schema(
        methods=["GET"],
        summary="The study's withdrawals",
        description="The audit records of the study's withdrawals (who withdrew a participant and when, how much "
                    "was erased), newest first, without the participants' personal data.",
        responses={200: WithdrawalSerializer(many=True), 404: NOT_FOUND},
        examples=[OpenApiExample("One withdrawal", response_only=True, value=[WITHDRAWAL_EXAMPLE.value])],
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None, filter_backends=[])
    def withdrawals(self, request, pk=None):
        study = self.get_object()
        if request.method == "GET":
            records = Withdrawal.objects.filter(study=study).select_related("withdrawn_by")
            return Response(WithdrawalSerializer(records, many=True).data)
        body = WithdrawalRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            outcome = participant_withdraw(user=request.user, study=study, **body.validated_data)
        except PlatformAccessDenied as exc:
            return Response({"detail": exc.message}, status=status.HTTP_403_FORBIDDEN)
        except ParticipantNotFound as exc:
            return Response({"detail": exc.message}, status=status.HTTP_404_NOT_FOUND)
        except WithdrawalError as exc:
            raise ValidationFailed({"non_field_errors": [exc.message]}) from exc
        return Response(WithdrawalOutcomeSerializer(outcome.withdrawal, context={"outcome": outcome}).data,
                        status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK)

    @extend_schema(
        summary="The study's bundle (zip)",
        description=(
            "One zip another lab can re-score: the design (`study.json`), items, rationales, generalization "
            "questions, Gen-U predictions, units, tasks, claims, every answer with worker pseudonyms and timings, "
            "flag reviews, unit scores, `results.json` of the latest run, `settings.json` (the app's version and "
            "every setting a score depends on), a Frictionless `datapackage.json` and `SHA256SUMS`. Streamed as "
            "it is made. Import it with `POST /api/v1/studies/import-bundle/`."
        ),
        responses={(200, "application/zip"): OpenApiTypes.BINARY, 404: NOT_FOUND},
        examples=[OpenApiExample("Another researcher's study", response_only=True, status_codes=["404"],
                                 value={"detail": "No Study matches the given query."})],
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def bundle(self, request, pk=None):
        study = self.get_object()
        response = StreamingHttpResponse(bundle_stream(study=study, user=request.user), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{bundle_filename(study)}"'
        return response

    @extend_schema(
        summary="Import a study bundle",
        description=(
            "Multipart: `file` (a bundle from `GET /api/v1/studies/<id>/bundle/`, of this or another installation) "
            "and `name` (the new study's). Creates a closed study owned by you whose scoring gives the bundle's "
            "`results.json` numbers. All or nothing: 400 lists every problem with its `record` (the bundle's "
            "file), `line` (CSV row), `field` and `reason`. Needs `studies.add_study`."
        ),
        request={"multipart/form-data": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}, "name": {"type": "string"}}}},
        responses={201: StudySerializer, 400: OpenApiTypes.OBJECT},
        examples=[OpenApiExample("A file changed after the bundle was made", response_only=True, status_codes=["400"],
                                 value={"file": ["bundle.zip: nothing imported: data/units.csv: field 'sha256': "
                                                 "checksum mismatch: ..."],
                                        "errors": [{"line": None, "column": None, "record": "data/units.csv",
                                                    "field": "sha256", "reason": "checksum mismatch: ..."}]})],
    )
    @action(detail=False, methods=["post"], url_path="import-bundle", parser_classes=[MultiPartParser, FormParser],
            pagination_class=None, filter_backends=[])
    def import_bundle(self, request):
        unknown = BundleImportFormSerializer().unknown_field_errors(request.data)
        if unknown:  # a field this form does not read is named, never dropped (``RejectUnknownFieldsMixin``)
            raise ValidationFailed(unknown)
        upload = request.FILES.get("file")
        if upload is None:
            raise ValidationFailed({"file": ["Attach the bundle (a .zip) as 'file'."]})
        try:
            study = bundle_import(file=upload, name=request.data.get("name", ""), owner=request.user,
                                  filename=upload.name)
        except BundleError as exc:
            return Response({"file": [str(exc)], "errors": [e.as_dict() for e in exc.errors]},
                            status=status.HTTP_400_BAD_REQUEST)
        study = self.get_queryset().get(pk=study.pk)
        return Response(StudySerializer(study, context=self.get_serializer_context()).data,
                        status=status.HTTP_201_CREATED)


class AnnotationViewSet(AnswersViewSet):
    """``/api/v1/annotations/``: the annotations app's answers list, with the filter by the utility
    of the answered unit (a score) that only this layer may add."""

    filterset_class = ScoredAnnotationFilter
