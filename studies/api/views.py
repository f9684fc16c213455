"""Endpoints of the studies app: datasets, items, rationale sources, rationales, generalization
questions (the reference data, each list limited to what the user may see) and imports.

Authentication, permissions, pagination and throttling are the ``REST_FRAMEWORK`` defaults
(``lab.api``); studies themselves are served by ``cockpit.api`` where the apps meet."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from studies.models import ImportJob, ImportRecord
from studies.selectors import (
    datasets_counted_for_user,
    generalization_questions_for_user,
    import_jobs_for_user,
    import_records_for_user,
    items_for_user,
    rationales_for_user,
    sources_for_user,
)
from studies.services.importers import ImportValidationError, import_run
from studies.services.importers.jobs import ImportQueueUnavailable, import_in_background, import_job_create

from .filters import (
    DatasetFilter,
    GeneralizationQuestionFilter,
    ImportRecordFilter,
    ItemFilter,
    RationaleFilter,
    RationaleSourceFilter,
)
from .serializers import (
    DatasetSerializer,
    ErrorSerializer,
    GeneralizationQuestionSerializer,
    ImportErrorSerializer,
    ImportJobSerializer,
    ImportRecordSerializer,
    ImportRequestSerializer,
    ItemSerializer,
    RationaleSerializer,
    RationaleSourceSerializer,
)

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
        description="Datasets of items (StrategyQA, OpenBookQA, your own), each with the number of its items "
        "you may read (those of the studies you can see, or all with `studies.view_item`).",
        examples=[DATASET_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One dataset", description="One dataset with the number of its items you may read.",
                           examples=[DATASET_EXAMPLE]),
)
class DatasetViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = DatasetSerializer
    filterset_class = DatasetFilter
    ordering_fields = ["id", "name"]

    def get_queryset(self):
        # Counts the items the user may read (the items list's), not the whole dataset's, as the admin does.
        return datasets_counted_for_user(user=self.request.user)


@extend_schema_view(
    list=extend_schema(
        summary="List items",
        description="Questions with their gold answer and gold rationale. Filter by dataset, split, study, external id.",
        examples=[ITEM_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One item", description="One question with its choices and gold answer.", examples=[ITEM_EXAMPLE]),
)
class ItemViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ItemSerializer
    filterset_class = ItemFilter
    ordering_fields = ["id", "external_id"]

    def get_queryset(self):
        return items_for_user(user=self.request.user)


@extend_schema_view(
    list=extend_schema(
        summary="List rationale sources",
        description="Where rationales come from: gold, imported files, LM configurations (with decoding settings).",
        examples=[SOURCE_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One rationale source", description="One source with its configuration.", examples=[SOURCE_EXAMPLE]),
)
class RationaleSourceViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = RationaleSourceSerializer
    filterset_class = RationaleSourceFilter
    ordering_fields = ["id", "name"]

    def get_queryset(self):
        return sources_for_user(user=self.request.user)


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
class RationaleViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = RationaleSerializer
    filterset_class = RationaleFilter
    ordering_fields = ["id"]

    def get_queryset(self):
        return rationales_for_user(user=self.request.user).select_related("source")


@extend_schema_view(
    list=extend_schema(
        summary="List generalization questions",
        description="Rephrase / counterfactual / similar questions of items, with validation status. "
        "Filter by item, dataset, split, study, `qtype` (rephrase, counterfactual or similar) and "
        "`validation_status`.",
        examples=[GENQ_EXAMPLE],
    ),
    retrieve=extend_schema(summary="One generalization question", description="One generalization question.", examples=[GENQ_EXAMPLE]),
)
class GeneralizationQuestionViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = GeneralizationQuestionSerializer
    filterset_class = GeneralizationQuestionFilter
    ordering_fields = ["id"]

    def get_queryset(self):
        return generalization_questions_for_user(user=self.request.user)


IMPORT_EXAMPLE = OpenApiExample("An item import", response_only=True, value={
            "id": 2, "kind": "strategyqa", "filename": "strategyqa_processed_test.json", "sha256": "9b1c...",
            "dataset": 1, "created": 458, "updated": 0, "unchanged": 0, "summary": {}, "imported_by": "dana",
            "imported_at": "2026-11-30T09:00:00Z"})


# --- Imports ----------------------------------------------------------------------------------
def import_file_options(data: dict) -> dict:
    """The importer's options from the API's form (``kind`` and ``file`` aside)."""
    options = {}
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
    return options


def import_file_run(*, data: dict, user) -> ImportRecord | ImportJob:
    """Run the importer of ``data["kind"]`` (``studies.services.importers.import_run``) on the
    uploaded file, or queue it as a background job when the file is over
    ``RL_IMPORT_BACKGROUND_BYTES``; raises its ImportValidationError when the file is bad."""
    options = import_file_options(data)
    if import_in_background(file=data["file"]):
        return import_job_create(kind=data["kind"], file=data["file"], user=user, options=options)
    return import_run(kind=data["kind"], file=data["file"], user=user, filename=data["file"].name, **options)


@extend_schema_view(
    list=extend_schema(
        summary="List imports",
        description="Applied imports, oldest first (id order; `?ordering=-imported_at` gives newest first): file name, "
                    "SHA-256, rows created / updated / unchanged.",
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
            "Re-importing the same file changes nothing. A file with more than `RL_IMPORT_MAX_ROWS` records "
            "(100,000) is refused. A file over `RL_IMPORT_BACKGROUND_BYTES` (4 MB) is imported by a background "
            "job: the answer is 202 with the job, whose `url` gives its progress (`status`, `stage`, "
            "`rows_read`) and, when done, its import `record` or, when failed, every bad row in `errors`. "
            "Needs a read-write token and `studies.add_importrecord`."
        ),
        request={"multipart/form-data": ImportRequestSerializer},
        responses={
            201: ImportRecordSerializer,
            202: OpenApiResponse(ImportJobSerializer, description="A large file: its import job, queued."),
            400: OpenApiResponse(ImportErrorSerializer, description="Nothing imported; every bad row listed."),
            503: OpenApiResponse(ErrorSerializer, description="A large file whose job could not be queued (the "
                                 "task queue cannot be reached): the job is marked failed, nothing was imported "
                                 "and the upload was not kept; upload the file again later."),
        },
        examples=[OpenApiExample("Rejected file", response_only=True, status_codes=["400"], value={
            "file": ["rationales.jsonl: nothing imported: line 3: field 'answer': the answer 'maybe' is not one of "
                     "yes/no (or True/False)"],
            "errors": [{"line": 3, "column": None, "record": "", "field": "answer",
                        "reason": "the answer 'maybe' is not one of yes/no (or True/False)"}]})],
    ),
)
class ImportViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ImportRecordSerializer
    ordering_fields = ["id", "imported_at"]
    filterset_class = ImportRecordFilter
    parser_classes = [MultiPartParser, FormParser]
    write_permissions = {"create": "studies.add_importrecord"}

    def get_queryset(self):
        return import_records_for_user(user=self.request.user).select_related("imported_by")

    def get_serializer_class(self):
        if self.action == "create":
            return ImportRequestSerializer
        return super().get_serializer_class()

    def create(self, request, *args, **kwargs):
        form = ImportRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            done = import_file_run(data=form.validated_data, user=request.user)
        except ImportQueueUnavailable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        except ImportValidationError as exc:
            errors = [e.as_dict() for e in exc.errors]
            return Response({"file": [str(exc)], "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        if isinstance(done, ImportJob):
            return Response(ImportJobSerializer(done, context={"request": request}).data,
                            status=status.HTTP_202_ACCEPTED)
        return Response(ImportRecordSerializer(done).data, status=status.HTTP_201_CREATED)


IMPORT_JOB_EXAMPLE = OpenApiExample("A background import, done", response_only=True, value={
    "id": 3, "url": "http://127.0.0.1:8000/api/v1/import-jobs/3/", "kind": "items", "filename": "big.csv",
    "size": 5242880, "status": "done", "stage": "finished", "rows_read": 90000, "error": "", "errors": [],
    "record": 7, "created_by": "dana", "created_at": "2026-12-02T09:00:00Z", "started_at": "2026-12-02T09:00:01Z",
    "finished_at": "2026-12-02T09:00:58Z"})


@extend_schema_view(
    list=extend_schema(summary="List import jobs",
                       description="Background imports (files over RL_IMPORT_BACKGROUND_BYTES), oldest first (id order; "
                                   "`?ordering=-created_at` gives newest first).",
                       examples=[IMPORT_JOB_EXAMPLE]),
    retrieve=extend_schema(summary="One import job",
                           description="Its progress: status, stage, rows read; its import record when done, "
                                       "every bad row when failed.", examples=[IMPORT_JOB_EXAMPLE]),
)
class ImportJobViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ImportJobSerializer
    ordering_fields = ["id", "created_at"]

    def get_queryset(self):
        return import_jobs_for_user(user=self.request.user).select_related("created_by")
