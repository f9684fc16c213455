"""Serializers of the studies API: read representations and the input of the write endpoints."""
from __future__ import annotations

from django.db.backends.base.operations import BaseDatabaseOperations
from rest_framework import serializers

from lab.api.serializers import RejectUnknownFieldsMixin
from lab.jsontext import text_problem
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    ImportJob,
    ImportRecord,
    Item,
    Platform,
    Rationale,
    RationaleSource,
    Split,
    Study,
    StudyShare,
)
from studies.selectors import datasets_for_user, sources_for_user
from studies.services.sharing import share_recipient_get


def check_storable_text(value: str) -> str:
    """Refuse text no database column can hold: NUL characters (PostgreSQL) and lone surrogates."""
    reason = text_problem(value)
    if reason:
        raise serializers.ValidationError(f"The text {reason}.")
    return value


class NameRelatedField(serializers.SlugRelatedField):
    """A related object by its name, refusing names that cannot be stored or looked up."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            check_storable_text(data)
        return super().to_internal_value(data)


class StorableTextMixin:
    """Input serializers: every text value must be storable (see ``check_storable_text``)."""

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        errors = {}
        for name, value in values.items():
            if isinstance(value, str):
                try:
                    check_storable_text(value)
                except serializers.ValidationError as exc:
                    errors[name] = exc.detail
        if errors:
            raise serializers.ValidationError(errors)
        return values


class DatasetSerializer(serializers.ModelSerializer):
    n_items = serializers.IntegerField(read_only=True, help_text="Number of the dataset's items you may read.")

    class Meta:
        model = Dataset
        fields = ["id", "name", "task_format", "choice_labels", "description", "n_items", "created_at", "updated_at"]


class ItemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Item
        fields = [
            "id", "dataset", "external_id", "question", "choices", "gold_answer", "gold_rationale", "split",
            "metadata", "created_at", "updated_at",
        ]
        read_only_fields = ["dataset"]  # output only: writable, a form would list every dataset


class RationaleSourceSerializer(serializers.ModelSerializer):
    class Meta:
        model = RationaleSource
        fields = [
            "id", "name", "kind", "description", "backend", "model_name_or_path", "endpoint_url", "template",
            "decoding", "demonstrations", "seed", "has_highlights", "created_at", "updated_at",
        ]


class RationaleSerializer(serializers.ModelSerializer):
    source_name = serializers.CharField(source="source.name", read_only=True)

    class Meta:
        model = Rationale
        fields = [
            "id", "item", "source", "source_name", "text", "predicted_answer", "prediction_correct", "highlights",
            "raw_output", "generation_info", "created_at", "updated_at",
        ]
        read_only_fields = ["item", "source"]  # output only: writable, a form would list every row


class GeneralizationQuestionSerializer(serializers.ModelSerializer):
    class Meta:
        model = GeneralizationQuestion
        fields = [
            "id", "item", "qtype", "text", "answer", "origin", "validation_status", "metadata", "created_at",
            "updated_at",
        ]
        read_only_fields = ["item"]  # output only: writable, a form would list every item


SHARE_LEVELS_HELP = (
    "view: read the study, its answers, scores and exports; change: also change its design and content, open "
    "and close it; pay: also publish it and move money (approve, reject, bonus, block). Each level includes "
    "the ones before it, and the permissions studies.change_study / studies.pay_workers still apply."
)


class StudyShareSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = StudyShare
        fields = ["username", "level"]
        extra_kwargs = {"level": {"help_text": SHARE_LEVELS_HELP}}


class StudySerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True, help_text="Username of the owner.")
    shared_with = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True,
        help_text="Usernames the study is shared with, at any level (`shares` gives each one's level).",
    )
    shares = StudyShareSerializer(many=True, read_only=True,
                                  help_text="Whom the study is shared with and at which level. " + SHARE_LEVELS_HELP)
    n_items = serializers.IntegerField(read_only=True, help_text="Items in the study.")
    n_units = serializers.IntegerField(read_only=True, help_text="Units (e.g. item x source) to annotate.")
    n_units_complete = serializers.IntegerField(read_only=True, help_text="Units with all their annotators.")
    n_annotations = serializers.IntegerField(read_only=True, help_text="Answers that count so far, both steps (the claims of submitted or approved tasks, not released and not on hold, and in a generalization study not to a question marked invalid: what scoring reads, the export's `counts`).")

    class Meta:
        model = Study
        fields = [
            "id", "name", "kind", "status", "dataset", "split", "item_sample_size", "sample_seed", "sources",
            "annotators_per_unit", "units_per_task", "reward", "hourly_pay_floor", "estimated_minutes_per_task",
            "platform", "consent_text", "instructions", "example", "faithfulness_enabled", "stop_when_decided",
            "is_imported_outcome", "owner", "shared_with", "n_items", "n_units", "n_units_complete", "n_annotations", "created_at",
            "updated_at", "shares",
        ]
        # Output only. A study is created from StudyDesignSerializer (its dataset and sources limited
        # to what the user may see); the browsable API draws a POST form from the view's serializer,
        # and writable here, dataset and sources listed every researcher's datasets and sources.
        read_only_fields = fields


# A study's sample seed is stored in a 32-bit column (``Study.sample_seed``): its range, as PostgreSQL
# holds it, on every database (SQLite's would take 64 bits), so a design refused on one is refused on all.
SAMPLE_SEED_RANGE = BaseDatabaseOperations.integer_field_ranges[Study._meta.get_field("sample_seed").get_internal_type()]


class StudyDesignSerializer(RejectUnknownFieldsMixin, StorableTextMixin, serializers.Serializer):
    """A study design as JSON: what ``POST /api/v1/studies/`` accepts (any other key is a 400 naming it)."""

    resource_serializer = StudySerializer

    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=Study.Kind.choices, default=Study.Kind.UTILITY)
    dataset = NameRelatedField(
        slug_field="name", queryset=Dataset.objects.all(), help_text="Dataset name (import its items first)."
    )
    split = serializers.ChoiceField(choices=Split.choices, default=Split.TEST)
    item_sample_size = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, help_text="Items drawn from the split; omit for all."
    )
    sample_seed = serializers.IntegerField(default=0, min_value=SAMPLE_SEED_RANGE[0], max_value=SAMPLE_SEED_RANGE[1])
    sources = NameRelatedField(
        slug_field="name", queryset=RationaleSource.objects.all(), many=True, required=False,
        help_text="Rationale source names.",
    )
    annotators_per_unit = serializers.IntegerField(min_value=1, max_value=1000, default=5)
    units_per_task = serializers.IntegerField(min_value=1, max_value=1000, default=10)
    reward = serializers.DecimalField(max_digits=8, decimal_places=2, min_value=0, default="2.00")
    hourly_pay_floor = serializers.DecimalField(max_digits=8, decimal_places=2, min_value=0, default="15.00")
    estimated_minutes_per_task = serializers.DecimalField(
        max_digits=6, decimal_places=1, min_value=0, default="6.0"
    )
    platform = serializers.ChoiceField(choices=Platform.choices, default=Platform.LINK)
    consent_text = serializers.CharField(required=False, allow_blank=True, default="")
    instructions = serializers.CharField(required=False, allow_blank=True, default="")
    example = serializers.CharField(required=False, allow_blank=True, default="")
    faithfulness_enabled = serializers.BooleanField(default=False)
    stop_when_decided = serializers.BooleanField(
        default=False, help_text="Stop collecting a unit's answers once no remaining answer could change whether its "
                                 "majority is right, before and after (utility and generalization studies; fixed once "
                                 "the study opens).")
    # Plain usernames, resolved in ``validate_shared_with`` as the study page's shares are: a
    # related field would render, in the browsable API, a select listing every account.
    shared_with = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False,
                                    error_messages={"invalid": "Give usernames (strings)."}),
        required=False, help_text="Usernames of researchers to share the study with, at `share_level`.",
    )
    share_level = serializers.ChoiceField(
        choices=StudyShare.Level.choices, default=StudyShare.Level.VIEW,
        help_text="The level of every share in `shared_with` (default view). " + SHARE_LEVELS_HELP,
    )

    def get_fields(self):
        """A design names only datasets and sources the requesting user may see."""
        fields = super().get_fields()
        user = getattr(self.context.get("request"), "user", None)
        fields["dataset"].queryset = datasets_for_user(user=user)
        fields["sources"].child_relation.queryset = sources_for_user(user=user)
        return fields

    def validate_name(self, value: str) -> str:
        value = value.strip()
        # Names are unique across every researcher's studies, so a taken name must be refused; the
        # message is the same whoever's study has it and says nothing more about that study.
        if Study.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"The name {value!r} is not available: choose another name.")
        return value

    def validate_shared_with(self, value: list[str]) -> list:
        """The users of the usernames (``share_recipient_get``, the study page's reading); any name
        that is not an active user's gets one answer, whoever it is."""
        users = []
        for username in value:
            check_storable_text(username)
            user = share_recipient_get(username)
            if user is None:
                raise serializers.ValidationError(f"{username!r}: not found or not yours.")
            users.append(user)
        return users


IMPORT_KINDS = [
    ("strategyqa", "StrategyQA items (strategyqa_processed_*.json)"),
    ("openbookqa", "OpenBookQA items (obqa_*.jsonl or the original *_complete.jsonl)"),
    ("items", "Items in CSV / JSON lines (columns id, question, answer, choices, rationale, split)"),
    ("rationales", "Rationales for items of a dataset (CSV / JSON lines)"),
    ("generalization", "Generalization questions (generalisation_final_*.json)"),
]


class ImportRequestSerializer(RejectUnknownFieldsMixin, StorableTextMixin, serializers.Serializer):
    """Multipart form of ``POST /api/v1/imports/`` (any other key is a 400 naming it)."""

    kind = serializers.ChoiceField(choices=IMPORT_KINDS)
    file = serializers.FileField(help_text="The file to import (UTF-8).")
    dataset = serializers.CharField(
        max_length=200, required=False, allow_blank=True,
        help_text="Dataset name: created by item imports (StrategyQA and OpenBookQA have defaults), looked up by "
        "rationale and generalization imports.",
    )
    split = serializers.ChoiceField(
        choices=Split.choices, required=False, allow_blank=True, help_text="Split; guessed from the file name if empty."
    )
    source = serializers.CharField(
        max_length=200, required=False, allow_blank=True,
        help_text="Rationale imports: the source name, when the file has no source column.",
    )
    file_format = serializers.ChoiceField(
        choices=[("csv", "CSV"), ("jsonl", "JSON lines"), ("json", "JSON")], required=False, allow_blank=True,
        help_text="Item and rationale imports: the file's format; guessed when empty.",
    )
    task_format = serializers.ChoiceField(
        choices=Dataset.TaskFormat.choices, required=False, allow_blank=True,
        help_text="Item imports of a new dataset: yes_no or multiple_choice; guessed from the answers when empty.",
    )
    validation_status = serializers.ChoiceField(
        choices=GeneralizationQuestion.Validation.choices, required=False, allow_blank=True,
        help_text="Generalization imports: the status given to the questions (default unvalidated).",
    )

    def validate(self, attrs):
        kind = attrs["kind"]
        if kind in {"items", "rationales", "generalization"} and not attrs.get("dataset"):
            raise serializers.ValidationError({"dataset": f"A dataset name is required for '{kind}' imports."})
        return attrs


class ImportRecordSerializer(serializers.ModelSerializer):
    imported_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ImportRecord
        fields = [
            "id", "kind", "filename", "sha256", "dataset", "created", "updated", "unchanged", "summary",
            "imported_by", "imported_at",
        ]
        read_only_fields = ["dataset"]  # output only (imports take ImportRequestSerializer)


class ImportJobSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="api:import-job-detail")

    class Meta:
        model = ImportJob
        fields = [
            "id", "url", "kind", "filename", "size", "status", "stage", "rows_read", "error", "errors", "record",
            "created_by", "created_at", "started_at", "finished_at",
        ]
        read_only_fields = ["record"]  # output only: writable, a form would list every import record


class RowErrorSerializer(serializers.Serializer):
    line = serializers.IntegerField(allow_null=True)
    column = serializers.IntegerField(allow_null=True)
    record = serializers.CharField()
    field = serializers.CharField()
    reason = serializers.CharField()


class ImportErrorSerializer(serializers.Serializer):
    """A rejected file has ``file`` and ``errors``; a bad form names its field(s) instead."""

    file = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Summary: nothing was imported."
    )
    errors = RowErrorSerializer(many=True, required=False, help_text="Every problem found, with its line and field.")


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
