"""Endpoints of the studies app: datasets, items, rationale sources, rationales, generalization
questions, studies (with their results, per-source summaries and streamed exports) and imports.

Views are thin: reads go through ``visible_studies``; writes call the owning app's service, which
is imported inside the view so that the API installs even where a feature is left out (then the
endpoint answers 503 "not available in this installation")."""
from __future__ import annotations

from django.db import transaction
from django.db.models import Count, F, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from annotations.api.export import annotation_columns, annotation_rows
from annotations.api.filters import UTILITY_CATEGORIES, AnnotationFilter
from annotations.models import Annotation, Unit
from scoring.api.export import SCORE_COLUMNS, score_rows, source_summaries
from scoring.api.filters import UnitScoreFilter
from scoring.api.serializers import SourceSummarySerializer
from scoring.models import ScoreRun, UnitScore
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    ImportRecord,
    Item,
    Rationale,
    RationaleSource,
    Split,
    Study,
)

from .common import RAW_WORKER_IDS_PARAM, ApiViewMixin, import_service, visible_studies, wants_raw_worker_ids
from .filters import (
    DatasetFilter,
    GeneralizationQuestionFilter,
    ImportRecordFilter,
    ItemFilter,
    RationaleFilter,
    RationaleSourceFilter,
    StudyFilter,
)
from .serializers import (
    DatasetSerializer,
    ErrorSerializer,
    GeneralizationQuestionSerializer,
    ImportErrorSerializer,
    ImportRecordSerializer,
    ImportRequestSerializer,
    ItemSerializer,
    RationaleSerializer,
    RationaleSourceSerializer,
    StudyDesignSerializer,
    StudySerializer,
)
from .streaming import EXPORT_RENDERERS, FORMATS, columns_markdown, streaming_export_response

NOT_FOUND = OpenApiResponse(ErrorSerializer, description="Not found, or not visible to you.")
BAD_REQUEST = OpenApiResponse(description="Bad input: the body names each field and what is wrong with it.")
UNAVAILABLE = OpenApiResponse(ErrorSerializer, description="The feature is not installed here.")


def _count(queryset, outer: str) -> Coalesce:
    """A correlated ``COUNT(*)`` (0 when no rows), cheaper than joins that multiply each other."""
    sub = queryset.filter(**{outer: OuterRef("pk")}).order_by().values(outer).annotate(c=Count("*")).values("c")
    return Coalesce(Subquery(sub, output_field=IntegerField()), Value(0))


DATASET_EXAMPLE = OpenApiExample("StrategyQA", response_only=True, value={
    "id": 1, "name": "strategyqa", "task_format": "yes_no", "choice_labels": [], "description": "",
    "n_items": 2290, "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})
ITEM_EXAMPLE = OpenApiExample("A StrategyQA item", response_only=True, value={
    "id": 52, "dataset": 1, "external_id": "7d2a8cbb", "question": "Could a llama birth twice during War "
    "in Vietnam (1945-46)?", "choices": [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}],
    "gold_answer": "no", "gold_rationale": "The War in Vietnam was 6 months. ...", "split": "test",
    "metadata": {}, "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})
SOURCE_EXAMPLE = OpenApiExample("An imported source", response_only=True, value={
    "id": 4, "name": "gpt3", "kind": "imported", "description": "", "backend": "", "model_name_or_path": "",
    "endpoint_url": "", "template": "", "decoding": {}, "demonstrations": [], "seed": 0,
    "has_highlights": False, "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})
RATIONALE_EXAMPLE = OpenApiExample("A rationale", response_only=True, value={
    "id": 700, "item": 52, "source": 4, "source_name": "gpt3", "text": "Llamas are pregnant for 11 months.",
    "predicted_answer": "no", "prediction_correct": True, "highlights": [], "raw_output": "",
    "generation_info": {"import_file": "gpt3_test.jsonl"}, "created_at": "2026-11-30T09:00:00Z",
    "updated_at": "2026-11-30T09:00:00Z"})
GENQ_EXAMPLE = OpenApiExample("A rephrase", response_only=True, value={
    "id": 31, "item": 52, "qtype": "rephrase", "text": "Can a llama give birth twice within six months?",
    "answer": "no", "origin": "generalisation_final_test.json", "validation_status": "valid",
    "metadata": {}, "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})


# --- Reference data ---------------------------------------------------------------------------
@extend_schema_view(
    list=extend_schema(
        summary="List datasets",
        description="Datasets of items (StrategyQA, OpenBookQA, your own), with their item counts.",
        examples=[DATASET_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One dataset", description="One dataset with its item count.", examples=[DATASET_EXAMPLE]),
)
class DatasetViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = DatasetSerializer
    filterset_class = DatasetFilter
    ordering_fields = ["id", "name"]

    def get_queryset(self):
        return Dataset.objects.annotate(n_items=_count(Item.objects.all(), "dataset"))


@extend_schema_view(
    list=extend_schema(
        summary="List items",
        description="Questions with their gold answer and gold rationale. Filter by dataset, split, study, external id.",
        examples=[ITEM_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One item", description="One question with its choices and gold answer.", examples=[ITEM_EXAMPLE]),
)
class ItemViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ItemSerializer
    filterset_class = ItemFilter
    ordering_fields = ["id", "external_id"]
    queryset = Item.objects.all()


@extend_schema_view(
    list=extend_schema(
        summary="List rationale sources",
        description="Where rationales come from: gold, imported files, LM configurations (with decoding settings).",
        examples=[SOURCE_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One rationale source", description="One source with its configuration.", examples=[SOURCE_EXAMPLE]),
)
class RationaleSourceViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = RationaleSourceSerializer
    filterset_class = RationaleSourceFilter
    ordering_fields = ["id", "name"]
    queryset = RationaleSource.objects.all()


@extend_schema_view(
    list=extend_schema(
        summary="List rationales",
        description=(
            "Free-text rationales with the source's predicted answer and how they were made. Filter by item, "
            "source (id or name), dataset, split, study. Rationale text is untrusted LM output: escape it."
        ),
        examples=[RATIONALE_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One rationale", description="One rationale with its generation record.", examples=[RATIONALE_EXAMPLE]),
)
class RationaleViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = RationaleSerializer
    filterset_class = RationaleFilter
    ordering_fields = ["id"]
    queryset = Rationale.objects.select_related("source")


@extend_schema_view(
    list=extend_schema(
        summary="List generalization questions",
        description="Rephrase / counterfactual / similar questions of items, with validation status. "
        "Filter by item, dataset, split, study, type, validation status.",
        examples=[GENQ_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One generalization question", description="One generalization question.", examples=[GENQ_EXAMPLE]),
)
class GeneralizationQuestionViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = GeneralizationQuestionSerializer
    filterset_class = GeneralizationQuestionFilter
    ordering_fields = ["id"]
    queryset = GeneralizationQuestion.objects.all()


# --- Studies ----------------------------------------------------------------------------------
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
    OpenApiParameter("source", OpenApiTypes.STR, description="Only this rationale source (id or name)."),
    _choice_param("split", Split.choices, "Only items of this split."),
    _choice_param("step", Annotation.Step.choices, "Only this step."),
    _choice_param("utility", UTILITY_CATEGORIES, "Only units of this utility category."),
    OpenApiParameter("worker", OpenApiTypes.STR, description="Only this worker pseudonym (comma-separated for several)."),
    OpenApiParameter("answered_after", OpenApiTypes.DATETIME, description="Answers recorded at or after this time."),
    OpenApiParameter("answered_before", OpenApiTypes.DATETIME, description="Answers recorded before this time."),
    OpenApiParameter("date", OpenApiTypes.DATE, description="Answers recorded on this day (UTC)."),
    OpenApiParameter(
        RAW_WORKER_IDS_PARAM, OpenApiTypes.BOOL,
        description="Append `worker_raw_id`; staff with `studies.view_raw_worker_ids` only (403 otherwise).",
    ),
]
SCORE_EXPORT_PARAMETERS = [
    FORMAT_PARAMETER,
    OpenApiParameter("source", OpenApiTypes.STR, description="Only this rationale source (id or name)."),
    _choice_param("split", Split.choices, "Only items of this split."),
    _choice_param("utility", UTILITY_CATEGORIES, "Only units of this utility category."),
]
STUDY_EXAMPLE = OpenApiExample("A utility study", response_only=True, value={
    "id": 3, "name": "strategyqa-utility", "kind": "utility", "status": "closed", "dataset": 1, "split": "test",
    "item_sample_size": None, "sample_seed": 0, "sources": [4, 5, 6], "annotators_per_unit": 5,
    "units_per_task": 10, "reward": "2.00", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "6.0",
    "platform": "prolific", "consent_text": "", "instructions": "", "example": "", "faithfulness_enabled": False,
    "is_imported_outcome": False, "owner": "dana", "shared_with": ["lee"], "n_items": 458, "n_units": 1374,
    "n_units_complete": 1374, "n_annotations": 13740, "created_at": "2026-11-30T09:00:00Z",
    "updated_at": "2026-11-30T09:00:00Z"})
DESIGN_EXAMPLE = OpenApiExample("A study design", request_only=True, value={
    "name": "strategyqa-utility-pilot", "kind": "utility", "dataset": "strategyqa", "split": "test",
    "item_sample_size": 50, "sample_seed": 1, "sources": ["gpt3", "t5large"], "annotators_per_unit": 5,
    "units_per_task": 10, "reward": "2.50", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "8.0",
    "platform": "prolific", "instructions": "Answer, read the explanation, answer again.", "shared_with": ["lee"]})


class ValidationFailed(ValidationError):
    """400 with a body naming the field(s)."""


def study_create_from_design(*, design: dict, user) -> Study:
    """Create a study through ``studies.services.studies.study_create`` (503 when it is missing)
    and share it; one transaction, so a failure leaves nothing behind."""
    study_create = import_service("studies.services.studies", "study_create", "Creating studies")
    StudyError = import_service("studies.services.studies", "StudyError", "Creating studies")
    shared_with = design.pop("shared_with", [])
    try:
        with transaction.atomic():
            study = study_create(owner=user, **design)
            if shared_with:
                study.shared_with.add(*shared_with)
    except StudyError as exc:
        raise ValidationFailed({"non_field_errors": [str(exc)]}) from exc
    return study


@extend_schema_view(
    list=extend_schema(
        summary="List studies",
        description=(
            "The studies you own and those shared with you (staff see all), with progress counts. "
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
            "service. Needs a read-write token and the permission `studies.add_study`. 400 names each bad field."
        ),
        request=StudyDesignSerializer,
        responses={201: StudySerializer, 400: BAD_REQUEST, 503: UNAVAILABLE},
        examples=[DESIGN_EXAMPLE, STUDY_EXAMPLE],
    ),
)
class StudyViewSet(ApiViewMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = StudySerializer
    filterset_class = StudyFilter
    ordering_fields = ["id", "created_at", "name"]
    write_permissions = {"create": "studies.add_study"}
    throttle_scope_for_action = {"export_annotations": "api_export", "export_scores": "api_export"}

    def get_queryset(self):
        complete = Unit.objects.filter(n_completed__gte=F("quota"))
        return (
            visible_studies(self.request.user)
            .select_related("owner")
            .prefetch_related("shared_with", "sources")
            .annotate(
                n_items=_count(Study.items.through.objects.all(), "study"),
                n_units=_count(Unit.objects.all(), "study"),
                n_units_complete=_count(complete, "study"),
                n_annotations=_count(Annotation.objects.all(), "claim__study"),
            )
        )

    def get_serializer_class(self):
        if self.action == "create":
            return StudyDesignSerializer
        return super().get_serializer_class()

    def create(self, request, *args, **kwargs):
        design = StudyDesignSerializer(data=request.data)
        design.is_valid(raise_exception=True)
        study = study_create_from_design(design=dict(design.validated_data), user=request.user)
        study = self.get_queryset().get(pk=study.pk)
        return Response(StudySerializer(study, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The study's results.json",
        description=(
            "The whole `results.json` of the study's latest finished scoring run: per-source utility shares with "
            "intervals, ties, agreement (Krippendorff's alpha, Fleiss' kappa), Theil's U and eta, Gen-U. "
            "404 until a scoring run has finished (start one with `POST /api/v1/score-runs/`)."
        ),
        responses={200: OpenApiTypes.OBJECT, 404: NOT_FOUND},
        examples=[OpenApiExample("results.json (abridged)", response_only=True, value={
            "study": {"id": 3, "name": "strategyqa-utility"},
            "sources": {"gpt3": {"n_units": 458, "useful": 0.21, "unsure": 0.45, "not_useful": 0.34}},
            "theils_u": {"task_accuracy": 0.111}})],
    )
    @action(detail=True, methods=["get"])
    def results(self, request, pk=None):
        study = self.get_object()
        run = ScoreRun.objects.filter(study=study, status=ScoreRun.Status.DONE).order_by("-finished_at", "-pk").first()
        if run is None:
            return Response(
                {"detail": "This study has no finished scoring run yet: start one with POST /api/v1/score-runs/."},
                status=status.HTTP_404_NOT_FOUND,
            )
        return Response(run.results)

    @extend_schema(
        summary="Per-source summary",
        description=(
            "Per rationale source, from the stored unit scores: numbers and shares of useful / unsure / not "
            "useful units, majority ties before and after, accuracies before and after the rationale, task "
            "accuracy of the source, mean Gen-U and similarity."
        ),
        responses={200: SourceSummarySerializer(many=True), 404: NOT_FOUND},
        examples=[OpenApiExample("Two sources", response_only=True, value=[{
            "source": 4, "source_name": "gpt3", "n_units": 458, "n_scored": 458, "n_useful": 96, "n_unsure": 206,
            "n_not_useful": 156, "share_useful": 0.209607, "share_unsure": 0.449782, "share_not_useful": 0.340611,
            "n_before_ties": 0, "n_after_ties": 0, "accuracy_before": 0.61, "accuracy_after": 0.66,
            "task_accuracy": 0.74, "mean_gen_u": None, "mean_similarity": None}])],
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def summary(self, request, pk=None):
        study = self.get_object()
        return Response(SourceSummarySerializer(source_summaries(study=study), many=True).data)

    def _file_format(self, request) -> str:
        value = request.query_params.get("file_format", "csv").strip().lower()
        if value not in FORMATS:
            raise ValidationFailed({"file_format": [f"{value!r} is not one of {', '.join(FORMATS)}."]})
        return value

    def _filtered(self, request, filterset_class, queryset):
        """``queryset`` (already limited to the study) filtered by the query string, less ``study``;
        400 naming the bad filters."""
        params = request.query_params.copy()
        params.pop("study", None)
        filterset = filterset_class(params, queryset=queryset, request=request)
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
        pagination_class=None, filter_backends=[],
    )
    def export_annotations(self, request, pk=None):
        study = self.get_object()
        file_format = self._file_format(request)
        raw = wants_raw_worker_ids(request)
        annotations = self._filtered(request, AnnotationFilter, Annotation.objects.filter(claim__study=study))
        rows = annotation_rows(annotations, study=study, raw_worker_ids=raw)
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
        pagination_class=None, filter_backends=[],
    )
    def export_scores(self, request, pk=None):
        study = self.get_object()
        file_format = self._file_format(request)
        scores = self._filtered(request, UnitScoreFilter, UnitScore.objects.filter(study=study))
        return streaming_export_response(
            columns=SCORE_COLUMNS, rows=score_rows(scores), file_format=file_format,
            filename=f"study-{study.pk}-scores",
        )


IMPORT_EXAMPLE = OpenApiExample("An item import", response_only=True, value={
            "id": 2, "kind": "strategyqa", "filename": "strategyqa_processed_test.json", "sha256": "9b1c...",
            "dataset": 1, "created": 458, "updated": 0, "unchanged": 0, "summary": {}, "imported_by": "dana",
            "imported_at": "2026-11-30T09:00:00Z"})


# --- Imports ----------------------------------------------------------------------------------
def import_file_run(*, data: dict, user) -> ImportRecord:
    """Run the importer of ``data["kind"]`` (``studies.services.importers.import_run``) on the
    uploaded file; raises its ImportValidationError when the file is bad."""
    import_run = import_service("studies.services.importers", "import_run", "Importing files")
    options = {"user": user, "filename": data["file"].name}
    if data.get("dataset"):
        options["dataset_name"] = data["dataset"]
    if data.get("split"):
        options["split"] = data["split"]
    if data["kind"] == "rationales" and data.get("source"):
        options["source_name"] = data["source"]
    if data["kind"] in ("items", "rationales") and data.get("file_format"):
        options["file_format"] = data["file_format"]
    if data["kind"] == "items" and data.get("task_format"):
        options["task_format"] = data["task_format"]
    if data["kind"] == "generalization" and data.get("validation_status"):
        options["validation_status"] = data["validation_status"]
    return import_run(kind=data["kind"], file=data["file"], **options)


@extend_schema_view(
    list=extend_schema(
        summary="List imports",
        description="Applied imports, newest first: file name, SHA-256, rows created / updated / unchanged.",
        examples=[IMPORT_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="One import", description="One applied import and what it changed.", examples=[IMPORT_EXAMPLE]
    ),
    create=extend_schema(
        summary="Import a file",
        description=(
            "Multipart upload of one file: StrategyQA or OpenBookQA items, generic items (CSV / JSON lines), "
            "rationales of one source, or generalization questions. The whole file is validated first: on any "
            "bad row nothing is written and the answer is 400 with every problem (line, field, reason). "
            "Re-importing the same file changes nothing. Needs a read-write token and `studies.add_importrecord`."
        ),
        request={"multipart/form-data": ImportRequestSerializer},
        responses={
            201: ImportRecordSerializer,
            400: OpenApiResponse(ImportErrorSerializer, description="Nothing imported; every bad row listed."),
            503: UNAVAILABLE,
        },
        examples=[OpenApiExample("Rejected file", response_only=True, status_codes=["400"], value={
            "file": ["rationales.jsonl: nothing imported: line 3: field 'answer': the answer 'maybe' is not one of "
                     "yes/no (or True/False)"],
            "errors": [{"line": 3, "column": None, "record": "", "field": "answer",
                        "reason": "the answer 'maybe' is not one of yes/no (or True/False)"}]})],
    ),
)
class ImportViewSet(ApiViewMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ImportRecordSerializer
    ordering_fields = ["id", "imported_at"]
    filterset_class = ImportRecordFilter
    parser_classes = [MultiPartParser, FormParser]
    write_permissions = {"create": "studies.add_importrecord"}
    queryset = ImportRecord.objects.select_related("imported_by")

    def get_serializer_class(self):
        if self.action == "create":
            return ImportRequestSerializer
        return super().get_serializer_class()

    def create(self, request, *args, **kwargs):
        form = ImportRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        ImportValidationError = import_service("studies.services.importers", "ImportValidationError", "Importing files")
        try:
            record = import_file_run(data=form.validated_data, user=request.user)
        except ImportValidationError as exc:
            errors = [e.as_dict() for e in exc.errors]
            return Response({"file": [str(exc)], "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        return Response(ImportRecordSerializer(record).data, status=status.HTTP_201_CREATED)
