"""LM generation jobs: start one (rationales, generalization questions, Gen-U answers, fine-tuning)
and read its progress, through the job service (``studies.services.generation``)."""
from __future__ import annotations

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from lab.api.serializers import RejectUnknownFieldsMixin
from lab.ids import MAX_ID, parse_id
from studies.models import Dataset, GenerationJob, QuestionGenerator, RationaleSource, Split
from studies.selectors import (
    datasets_for_user,
    generation_jobs_for_user,
    question_generators_for_user,
    sources_for_user,
)
from studies.services.generation import GenerationError, generation_job_create
from studies.services.generation.common import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE
from studies.services.generation.inputs import TRAIN_ITEM_IDS
from studies.services.generation.jobs import already_queued_message

from .filters import GenerationJobFilter
from .serializers import check_storable_text


class GenerationJobSerializer(serializers.ModelSerializer):
    source_name = serializers.CharField(source="source.name", read_only=True, allow_null=True, default=None)
    percent = serializers.FloatField(read_only=True, help_text="done / total, in percent.")
    n_failures = serializers.IntegerField(source="failed", read_only=True, help_text="Outputs that did not parse.")

    class Meta:
        model = GenerationJob
        fields = [
            "id", "kind", "status", "source", "source_name", "generator", "dataset", "split", "batch_size", "params",
            "total", "done", "n_failures", "percent", "rate", "eta_seconds", "started_at", "finished_at",
            "cancel_requested", "error", "celery_task_id", "created_at", "updated_at",
        ]
        # Output only (jobs start through GenerationJobStartSerializer): a writable related field
        # would list every source, generator and dataset in a browsable form.
        read_only_fields = fields

    def to_representation(self, instance):
        """The job; a fine-tuning job's ``params`` say how many items it trains on (``train_items``)
        instead of listing their ids (``train_item_ids``: one id per item of the split, 110 KB
        on a 20,000-item split, on every row of the list). The ids stay in the job's record, shown
        on its admin page."""
        data = super().to_representation(instance)
        params = data.get("params")
        if isinstance(params, dict) and isinstance(params.get(TRAIN_ITEM_IDS), list):
            data["params"] = {**{k: v for k, v in params.items() if k != TRAIN_ITEM_IDS},
                              "train_items": len(params[TRAIN_ITEM_IDS])}
        return data


class GenerationJobAlreadyQueuedSerializer(GenerationJobSerializer):
    """The answer to a start asked while the requester's own job with the same inputs is queued or running."""

    detail = serializers.SerializerMethodField(help_text="Says that the same job is already queued or running and "
                                                         "no second job was started.")

    class Meta(GenerationJobSerializer.Meta):
        fields = [*GenerationJobSerializer.Meta.fields, "detail"]

    def get_detail(self, obj) -> str:
        return already_queued_message(obj)


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}]})
class _NameOrIdField(serializers.Field):
    """A related object by id (integer) or by its unique name (string), among those ``visible``
    (a selector taking ``user``) shows the requesting user: a row they may not read is answered as
    one that does not exist. Without ``visible``, every row of ``model``."""

    def __init__(self, model, *, visible=None, **kwargs):
        self.model = model
        self.visible = visible
        super().__init__(**kwargs)

    def _rows(self):
        if self.visible is None:
            return self.model.objects.all()
        request = self.context.get("request")
        return self.visible(user=getattr(request, "user", None))

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, str)) or data == "":
            raise serializers.ValidationError("Give an id (integer) or a name (string).")
        if isinstance(data, str):
            check_storable_text(data)
        if isinstance(data, int) or (data.strip().isascii() and data.strip().isdigit()):
            pk = data if isinstance(data, int) else parse_id(data)
            if pk is None or not 1 <= pk <= MAX_ID:
                raise serializers.ValidationError(f"Ids are whole numbers from 1 to {MAX_ID}.")
            lookup = {"pk": pk}
        else:
            lookup = {"name": str(data).strip()}
        obj = self._rows().filter(**lookup).first()
        if obj is None:
            raise serializers.ValidationError(f"No {self.model._meta.verbose_name} with {next(iter(lookup.values()))!r}.")
        return obj

    def to_representation(self, value):
        return value.pk


class GenerationJobStartSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """What ``POST /api/v1/generation-jobs/`` accepts; any other key is a 400 naming it (``items`` for
    ``item_ids`` would otherwise start a job over the whole split)."""

    resource_serializer = GenerationJobSerializer
    kind = serializers.ChoiceField(choices=GenerationJob.Kind.choices)
    source = _NameOrIdField(
        RationaleSource, visible=sources_for_user, required=False, help_text="LM rationale source (id or name): rationales and genu_answers; the highlight source: faithfulness."
    )
    generator = _NameOrIdField(
        QuestionGenerator, visible=question_generators_for_user, required=False,
        help_text="Question generator (id or name): generalization_questions.",
    )
    dataset = _NameOrIdField(Dataset, visible=datasets_for_user, required=False, help_text="Dataset (id or name).")
    split = serializers.ChoiceField(choices=Split.choices, required=False, allow_blank=True, default="")
    item_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), required=False, allow_empty=False, max_length=100_000,
        help_text="Only these items (instead of a dataset split).",
    )
    limit = serializers.IntegerField(min_value=1, required=False, help_text="At most this many items.")
    batch_size = serializers.IntegerField(min_value=1, max_value=MAX_BATCH_SIZE, default=DEFAULT_BATCH_SIZE)
    params = serializers.DictField(
        required=False, default=dict,
        help_text="Per kind: max_requests / max_tokens (openai budget); genu_answers: answerer_i, answerer_ir "
        "(LM source ids), only_valid (default true: validated questions only); faithfulness: task_model (folder, hub "
        "name or .gguf file; empty: the highlight source's own model), task_backend (classifier | seq2seq | causal), "
        "y_hat_from (highlight | full; default highlight for the source's own model, full for another); finetune: "
        "training parameters (preset paper-answerers|paper-quark-start|feb-few-shot|quick, mode, base_model, ...); "
        "quark (source = the policy to improve): reward (genu or marker:WORD), settings (Quark settings: preset "
        "default | reference, steps, n_reward_tokens, kl_coef, ...), checkpoint_every, max_accuracy_drop, "
        "register_without_gain, validation_split / heldout_split, output_name, answerer_i / answerer_ir (genu). "
        "`manage.py quark_train --help` explains each. Any other key (the ones a job writes as it runs, such as "
        "cursor, usage, history, report, best, checkpoint_step) answers 400 naming it.",
    )

    def validate(self, attrs):
        kind = attrs["kind"]
        errors = {}
        if kind in (GenerationJob.Kind.RATIONALES, GenerationJob.Kind.GENU_ANSWERS,
                    GenerationJob.Kind.FAITHFULNESS) and not attrs.get("source"):
            errors["source"] = f"A rationale source is required for '{kind}' jobs."
        if kind == GenerationJob.Kind.GENERALIZATION_QUESTIONS and not attrs.get("generator"):
            errors["generator"] = "A question generator is required for generalization_questions jobs."
        needs_items = kind != GenerationJob.Kind.FINETUNE
        if not attrs.get("dataset") and not (needs_items and attrs.get("item_ids")):
            errors["dataset"] = f"A dataset (or item_ids) is required for '{kind}' jobs."
        if kind == GenerationJob.Kind.GENU_ANSWERS:
            for role in ("answerer_i", "answerer_ir"):
                value = attrs["params"].get(role)
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ID:
                    errors["params"] = f"params.{role} must be the id of a language model rationale source."
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


JOB_EXAMPLE = OpenApiExample("A running rationale job", response_only=True, value={
    "id": 12, "kind": "rationales", "status": "running", "source": 7, "source_name": "t5-large-feb", "generator": None,
    "dataset": 1, "split": "dev", "batch_size": 16, "params": {}, "total": 184, "done": 64, "n_failures": 1,
    "percent": 34.78, "rate": 0.9, "eta_seconds": 133.3, "started_at": "2026-11-30T10:00:00Z", "finished_at": None,
    "cancel_requested": False, "error": "", "celery_task_id": "8e3c...", "created_at": "2026-11-30T09:59:58Z",
    "updated_at": "2026-11-30T10:01:10Z"})


@extend_schema_view(
    list=extend_schema(
        summary="List generation jobs",
        description="LM jobs (rationales, generalization questions, Gen-U answers, faithfulness probabilities, "
        "fine-tuning, Quark) with their progress.",
        examples=[JOB_EXAMPLE],
    ),
    retrieve=extend_schema(
        summary="Generation job progress",
        description="Poll `done` / `total`, `rate` and `eta_seconds`; `status` ends done, failed (see `error`) or "
        "cancelled. Outputs that did not parse are counted in `n_failures` and kept with their raw text.",
        examples=[JOB_EXAMPLE],
    ),
    create=extend_schema(
        summary="Start a generation job",
        description=(
            "Queue an LM job on the `lm` queue; it runs in batches and survives a worker restart. Needs a "
            "read-write token and the permission `studies.add_generationjob`. The source or question generator, "
            "dataset, item ids and the sources `params` name (answerer_i, answerer_ir) must be ones you may read: "
            "another researcher's "
            "is answered as one that does not exist. 400 names the missing or bad field. Asked again while your "
            "job with the same inputs is queued or running (a retried request), it answers 200 with that job and a "
            "`detail` instead of starting a second one."
        ),
        request=GenerationJobStartSerializer,
        responses={
            202: GenerationJobSerializer,
            200: GenerationJobAlreadyQueuedSerializer,
            400: OpenApiResponse(description="Bad input: the body names each field and what is wrong."),
        },
        examples=[
            OpenApiExample("Rationales for the dev split", request_only=True,
                           value={"kind": "rationales", "source": "t5-large-feb", "dataset": "strategyqa", "split": "dev"}),
            JOB_EXAMPLE,
        ],
    ),
)
class GenerationJobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = GenerationJobSerializer
    filterset_class = GenerationJobFilter
    ordering_fields = ["id", "created_at"]
    write_permissions = {"create": "studies.add_generationjob"}

    def get_queryset(self):
        return generation_jobs_for_user(user=self.request.user).select_related("source")

    def get_serializer_class(self):
        if self.action == "create":
            return GenerationJobStartSerializer
        return super().get_serializer_class()

    def create(self, request, *args, **kwargs):
        form = GenerationJobStartSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            job = generation_job_create(
                kind=data["kind"], source=data.get("source"), generator=data.get("generator"),
                dataset=data.get("dataset"), split=data.get("split", ""), item_ids=data.get("item_ids"),
                limit=data.get("limit"), batch_size=data["batch_size"], params=data.get("params") or {},
                user=request.user,
            )
        except GenerationError as exc:
            raise ValidationError({"non_field_errors": [str(exc)]}) from exc
        except DjangoValidationError as exc:
            detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
            raise ValidationError(detail) from exc
        except ObjectDoesNotExist as exc:
            raise ValidationError({"non_field_errors": [f"Not found: {exc}"]}) from exc
        if job.already_queued:
            return Response(GenerationJobAlreadyQueuedSerializer(job).data, status=status.HTTP_200_OK)
        return Response(GenerationJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)
