"""The study data model: datasets and their items, rationale sources and rationales,
generalization questions, and study designs.

Answers are stored as *choice labels*: ``"yes"`` / ``"no"`` for yes/no datasets and the option
label (``"a"`` .. ``"d"``) for multiple choice. ``Item.choices`` holds the labelled options in
display order, so templates and the questionnaire never guess.
"""
from __future__ import annotations

import secrets
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from lab.transitions import StatusMachine
from studies.choices import YES_NO_CHOICES as YES_NO_CHOICES  # re-exported by studies.models
from studies.choices import choices_problem, correct_answer_problem, genq_choices, label_length_checked
from studies.lm.templates import demonstrations_problem


class Platform(models.TextChoices):
    """The crowd platforms a study runs on and a worker arrives from (one enum for all)."""

    LINK = "link", "Participant links"
    PROLIFIC = "prolific", "Prolific"
    MTURK = "mturk", "Amazon Mechanical Turk"


def validate_endpoint_url(value: str) -> None:
    """An LM endpoint URL (``RationaleSource`` / ``QuestionGenerator.endpoint_url``): http or https
    only, and no credentials in it (``user:pass@``). Which endpoints get the operator's API key
    is the backend's decision (``studies.lm.backends.openai_key_decision``), not this one's."""
    if not value:
        return
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValidationError("Enter a valid URL.", code="invalid") from exc
    if parts.scheme.lower() not in {"http", "https"}:
        raise ValidationError("An endpoint URL must start with http:// or https://.", code="endpoint_scheme")
    if "@" in parts.netloc:
        raise ValidationError("An endpoint URL must not carry a user name or password (user:pass@).",
                              code="endpoint_credentials")


class EndpointUrlChecked:
    """For a model with an LM ``endpoint_url`` (``RationaleSource``, ``QuestionGenerator``): its
    validation (``full_clean``, forms, importers) adds :func:`validate_endpoint_url`'s error, unless
    the field is excluded or already has one. A check in ``clean_fields`` rather than a field
    validator, so the field (and its migrations) stays as is."""

    def clean_fields(self, exclude=None) -> None:
        errors: dict = {}
        try:
            super().clean_fields(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if "endpoint_url" not in (exclude or ()) and "endpoint_url" not in errors:
            try:
                validate_endpoint_url(self.endpoint_url)
            except ValidationError as exc:
                errors["endpoint_url"] = exc.error_list
        if errors:
            raise ValidationError(errors)


class TimeStamped(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Dataset(TimeStamped):
    class TaskFormat(models.TextChoices):
        YES_NO = "yes_no", "Yes / no"
        MULTIPLE_CHOICE = "multiple_choice", "Multiple choice"

    name = models.CharField(max_length=200, unique=True)
    task_format = models.CharField(max_length=20, choices=TaskFormat.choices)
    # For multiple choice: the option labels in order, e.g. ["a", "b", "c", "d"].
    choice_labels = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_yes_no(self) -> bool:
        return self.task_format == self.TaskFormat.YES_NO

    def allowed_labels(self) -> list[str]:
        if self.is_yes_no:
            return ["yes", "no"]
        return list(self.choice_labels)


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    DEV = "dev", "Dev"
    TEST = "test", "Test"
    OTHER = "other", "Other"


class Item(TimeStamped):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    external_id = models.CharField(max_length=200)
    question = models.TextField()
    # [{"label": "a", "text": "..."}, ...]; yes/no items hold YES_NO_CHOICES.
    choices = models.JSONField(default=list)
    gold_answer = models.CharField(max_length=50)
    gold_rationale = models.TextField(blank=True)
    split = models.CharField(max_length=10, choices=Split.choices, default=Split.OTHER)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["dataset_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "external_id"], name="item_unique_external_id"),
            models.CheckConstraint(condition=~Q(question=""), name="item_question_not_empty"),
            models.CheckConstraint(condition=~Q(gold_answer=""), name="item_gold_answer_not_empty"),
            models.CheckConstraint(condition=~Q(external_id=""), name="item_external_id_not_empty"),
        ]
        indexes = [models.Index(fields=["dataset", "split"])]

    def __str__(self) -> str:
        return f"{self.external_id}: {self.question[:60]}"

    def choice_text(self, label: str) -> str:
        for choice in self.choices:
            if choice["label"] == label:
                return choice["text"]
        return label


class RationaleSource(EndpointUrlChecked, TimeStamped):
    """Where rationales come from: gold, an imported file, or an LM configuration.

    Everything needed to reproduce an LM output lives here and is copied onto every
    rationale it produces (``Rationale.generation_info``)."""

    class Kind(models.TextChoices):
        GOLD = "gold", "Gold (dataset rationale)"
        IMPORTED = "imported", "Imported file"
        LM = "lm", "Language model"

    class Backend(models.TextChoices):
        NONE = "", "—"
        SEQ2SEQ = "seq2seq", "Seq2seq transformers (T5 family)"
        CAUSAL = "causal", "Causal transformers (GPT-2 family)"
        OPENAI = "openai", "OpenAI-compatible HTTP endpoint"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.IMPORTED)
    description = models.TextField(blank=True)
    backend = models.CharField(max_length=20, choices=Backend.choices, blank=True, default="")
    model_name_or_path = models.CharField(max_length=500, blank=True)
    endpoint_url = models.URLField(blank=True, help_text="OpenAI-compatible base URL, for the openai backend.")
    template = models.TextField(blank=True, help_text="Prompt template; empty uses the FEB default.")
    # {"do_sample": false, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "num_return_sequences": 1}
    decoding = models.JSONField(default=dict, blank=True)
    demonstrations = models.JSONField(default=list, blank=True)
    seed = models.IntegerField(default=0)
    # Models without highlights leave this empty; sources with extractive highlights enable faithfulness.
    has_highlights = models.BooleanField(default=False)
    # For fine-tuned checkpoints: how it was trained (preset, base model, data, epochs, lr, batch
    # size, seed, steps, final loss, job id); empty for everything else.
    training = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind="lm", backend__in=["seq2seq", "causal", "openai"]) | (~Q(kind="lm") & Q(backend="")),
                name="source_backend_matches_kind",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        """Its own demonstrations are ones a job can read (``templates.demonstrations_problem``),
        whichever form, API or importer writes them."""
        super().clean()
        problem = demonstrations_problem(self.demonstrations)
        if problem:
            raise ValidationError({"demonstrations": problem[0].upper() + problem[1:] + "."})


class Rationale(TimeStamped):
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="rationales")
    source = models.ForeignKey(RationaleSource, on_delete=models.CASCADE, related_name="rationales")
    text = models.TextField()
    # The source's predicted answer label; blank when unknown (e.g. released files without it).
    predicted_answer = models.CharField(max_length=50, blank=True)
    prediction_correct = models.BooleanField(null=True, blank=True)
    # Extractive highlight spans over the question: [[start, end], ...] character offsets.
    highlights = models.JSONField(default=list, blank=True)
    # Faithfulness of the highlight (SPEC section 6), what scoring reads: {"p_full", "p_highlight",
    # "p_without"} (probabilities of y_hat, the class predicted from the highlight), "y_hat", and
    # where they come from ("task_model" and "job_id", or "imported_from").
    faithfulness = models.JSONField(default=dict, blank=True)
    raw_output = models.TextField(blank=True)
    # How exactly it was made: backend, model, template, decoding, seed, job id, import file.
    generation_info = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["item_id", "source_id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "source"], name="rationale_one_per_item_source"),
            models.CheckConstraint(condition=~Q(text=""), name="rationale_text_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.source} on {self.item.external_id}"


class GeneralizationQuestion(TimeStamped):
    class Type(models.TextChoices):
        REPHRASE = "rephrase", "Rephrase"
        COUNTERFACTUAL = "counterfactual", "Counterfactual"
        SIMILAR = "similar", "Similar reasoning"

    class Validation(models.TextChoices):
        UNVALIDATED = "unvalidated", "Unvalidated"
        VALID = "valid", "Valid"
        INVALID = "invalid", "Invalid"

    # The researchers' judgement of a question: any judgement may be revised (an import or the
    # admin's actions), but every change goes through the machine like any status.
    STATUS = StatusMachine("validation_status", {
        Validation.UNVALIDATED: {Validation.VALID, Validation.INVALID},
        Validation.VALID: {Validation.INVALID, Validation.UNVALIDATED},
        Validation.INVALID: {Validation.VALID, Validation.UNVALIDATED},
    })

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="generalization_questions")
    qtype = models.CharField("type", max_length=20, choices=Type.choices)
    text = models.TextField()
    answer = models.CharField(max_length=50)
    origin = models.CharField(max_length=200, blank=True, help_text="Import file or generator that produced it.")
    validation_status = models.CharField(
        max_length=20, choices=Validation.choices, default=Validation.UNVALIDATED
    )
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["item_id", "qtype", "id"]
        constraints = [
            models.UniqueConstraint(fields=["item", "qtype", "text"], name="genq_unique_per_item_type"),
            models.CheckConstraint(condition=~Q(text=""), name="genq_text_not_empty"),
            models.CheckConstraint(condition=~Q(answer=""), name="genq_answer_not_empty"),
        ]

    def __str__(self) -> str:
        return f"[{self.qtype}] {self.text[:60]}"

    def clean(self):
        """What a question must be to be asked and scored, whichever form or importer writes it:
        a known type and validation status; ``metadata`` a JSON object whose ``"choices"``, when
        given, is a list of at least two choices (``studies.choices.choices_problem``); and its
        answer one of the choices it offers (``genq_choices``: its own, else those of its item, when
        loaded: ``_item_or_none``), or every worker's answer would be scored wrong. Each problem is
        raised against its field."""
        super().clean()
        errors: dict[str, str] = {}
        if self.qtype not in self.Type.values:
            errors["qtype"] = f"'{str(self.qtype)[:30]}' is not a question type ({', '.join(self.Type.values)})."
        if self.validation_status not in self.Validation.values:
            errors["validation_status"] = (f"'{str(self.validation_status)[:30]}' is not a validation status "
                                           f"({', '.join(self.Validation.values)}).")
        own = None
        if not isinstance(self.metadata, dict):
            errors["metadata"] = "metadata must be a JSON object, e.g. {}."
        elif "choices" in self.metadata:
            own = self.metadata["choices"]
            problem = choices_problem(own, length_checked=label_length_checked(self))
            if problem:
                errors["metadata"] = f'metadata "choices": {problem}.'
        if "metadata" not in errors and self.answer:
            item = None if own else self._item_or_none()
            if own or item is not None:
                problem = correct_answer_problem(genq_choices(self, item), self.answer)
                if problem:
                    errors["answer"] = problem
        if errors:
            raise ValidationError(errors)

    def _item_or_none(self):
        """The question's item when it is loaded (a form sets it, as does ``item=``), else None: a
        writer that names only ``item_id`` (the importers, which check every answer against the
        dataset's labels and resolve the items in bulk, ``upsert`` leaving relations unvalidated
        for the same reason) is not made to read its items again one query a row."""
        return self.item if self._meta.get_field("item").is_cached(self) else None


def study_entry_token_new() -> str:
    """A new study's public entry token (``/w/s/<token>/``): random and unguessable (192 bits),
    URL-safe (letters, digits, ``-`` and ``_``), never derived from ``SECRET_KEY``."""
    return secrets.token_urlsafe(24)


def study_completion_code_new() -> str:
    """A new study's completion code: eight uppercase hexadecimal digits, random."""
    return secrets.token_hex(4).upper()


class Study(TimeStamped):
    class Kind(models.TextChoices):
        UTILITY = "utility", "Utility"
        GENERALIZATION = "generalization", "Generalization"
        QUESTION_VALIDATION = "question_validation", "Question validation"
        RATIONALE_PROPERTIES = "rationale_properties", "Rationale properties"

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    # A draft opens (its units are built) or is dropped; an open study closes. Closed is final:
    # copy a study to run it again.
    STATUS = StatusMachine("status", {
        Status.DRAFT: {Status.OPEN, Status.CLOSED},
        Status.OPEN: {Status.CLOSED},
    })

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=30, choices=Kind.choices, default=Kind.UTILITY)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="studies")
    split = models.CharField(max_length=10, choices=Split.choices, default=Split.TEST)
    item_sample_size = models.PositiveIntegerField(
        null=True, blank=True, help_text="Number of items drawn from the split; empty takes all."
    )
    sample_seed = models.IntegerField(default=0)
    items = models.ManyToManyField(Item, blank=True, related_name="studies")
    sources = models.ManyToManyField(RationaleSource, blank=True, related_name="studies")
    annotators_per_unit = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    units_per_task = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    reward = models.DecimalField(
        max_digits=8, decimal_places=2, default=Decimal("2.00"),
        help_text="Base pay per task, in the platform's currency (Prolific: the RL_PROLIFIC_CURRENCY setting; "
                  "MTurk: USD).",
    )
    hourly_pay_floor = models.DecimalField(
        max_digits=8, decimal_places=2, default=Decimal("15.00"),
        help_text="Minimum effective hourly pay, in the platform's currency (Prolific: the RL_PROLIFIC_CURRENCY "
                  "setting; MTurk: USD).",
    )
    estimated_minutes_per_task = models.DecimalField(
        max_digits=6, decimal_places=1, default=Decimal("6.0"),
        help_text="Used for pay estimates until recorded task times exist.",
    )
    platform = models.CharField(max_length=20, choices=Platform.choices, default=Platform.LINK)
    # What a task's workers are promised, fixed when the study opens (``annotations.services.opening
    # .study_open``) from the deadline rule as it read then (``annotations.services.deadlines``:
    # RL_ASSIGNMENT_MINUTES and RL_FIRST_ANSWER_MINUTES, or their rules) and read from then on by its
    # tasks, its publishes (the platform's time limit) and its results, whatever the settings become.
    # Empty while a draft (the rule as it reads now counts). Studies already open or closed when the
    # migration adding them ran were filled by it from the rule as it read then (studies 0016).
    # Never a researcher's to set: not editable, and ``study_update`` refuses them.
    assignment_minutes = models.FloatField(
        null=True, blank=True, editable=False, verbose_name="minutes a worker has for a task",
        help_text="Fixed when the study opens, from RL_ASSIGNMENT_MINUTES (unset: four times the estimated minutes, "
                  "at least 30) as it read then: what its workers were promised and what its platform's time limit "
                  "is set from. Empty while a draft.",
    )
    first_answer_minutes = models.FloatField(
        null=True, blank=True, editable=False, verbose_name="minutes a new task waits for its first answer",
        help_text="Fixed when the study opens, from RL_FIRST_ANSWER_MINUTES (unset: the estimated minutes, at least "
                  "10; never more than the task's minutes) as it read then: a task with no answer by then gives "
                  "its units back. Empty while a draft.",
    )
    # What the platforms were sent: the entry URL's token (``annotations.platforms.handoff``) and the
    # completion code workers get back when no Prolific publication stores one. Made once, random,
    # when the study is made (every path that makes one: a design, a bundle's copy, imported
    # outcomes), and never changed: rotating ``DJANGO_SECRET_KEY`` or moving the database keeps
    # every link and code already out. Studies older than studies 0020 keep the values derived from
    # the key in force when it ran, the ones they had been published with. The columns allow NULL, so
    # a row inserted by code that does not know them (the previous release during a deploy, a
    # migration's historical model) is valid: its values are made the first time they are read
    # (``studies.services.studies.study_public_ids``).
    entry_token = models.CharField(
        max_length=64, unique=True, null=True, editable=False, default=study_entry_token_new,
        help_text="The token of the study's public entry URL (/w/s/<token>/); never changes.",
    )
    completion_code = models.CharField(
        max_length=16, null=True, editable=False, default=study_completion_code_new,
        help_text="The completion code workers get back unless the study's Prolific publication stores one; "
                  "never changes.",
    )
    consent_text = models.TextField(blank=True)
    instructions = models.TextField(blank=True)
    example = models.TextField(blank=True, help_text="A worked example shown with the instructions.")
    faithfulness_enabled = models.BooleanField(default=False)
    # Stop collecting a unit once no remaining answer could change its score (the majority's
    # correctness before and after: ``studies.majority.outcome_decided``); utility and generalization
    # studies only. A design setting: fixed once the study opens (``study_locked_changes``).
    stop_when_decided = models.BooleanField(
        # db_default: rows written by an older schema's code (migration tests, a rolling deploy) get False.
        default=False, db_default=False, verbose_name="stop a unit when its result is decided",
        help_text="Stop collecting a unit's answers once no remaining answer could change whether its majority "
                  "is right, before and after the rationale (a tie counts as wrong). Saves answers; fixed once the "
                  "study opens.",
    )
    # None: the operator's study (a command, a bundle imported with no owner). PROTECT: an account
    # that owns a study cannot be deleted (deactivate it instead); an owner-less study borrows Figure
    # 4's utility from the operator's studies only, so a deleted owner would change published numbers.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="owned_studies"
    )
    # Each share has a level (view, change or pay: ``StudyShare``); studies.selectors.studies_for_user reads it.
    shared_with = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="shared_studies",
                                         through="StudyShare")
    # A study of outcomes collected elsewhere (e.g. the released rationale_utility.json).
    is_imported_outcome = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "studies"
        # Moving money for a study (publish, approve, reject, bonus, close on the platform) is a right
        # of its own, on top of seeing the study (studies.selectors.studies_for_user, access PAY).
        permissions = [("pay_workers", "Can publish, approve, reject and pay workers of the studies they may see")]
        constraints = [
            models.CheckConstraint(condition=Q(annotators_per_unit__gte=1), name="study_annotators_positive"),
            models.CheckConstraint(condition=Q(units_per_task__gte=1), name="study_units_per_task_positive"),
            models.CheckConstraint(condition=Q(reward__gte=0), name="study_reward_not_negative"),
            models.CheckConstraint(condition=Q(hourly_pay_floor__gte=0), name="study_floor_not_negative"),
        ]

    def __str__(self) -> str:
        return self.name


class ImportRecord(models.Model):
    """One applied import: what file, what it changed. Re-importing the same file adds a record
    with zero changes, so the history shows it was seen."""

    kind = models.CharField(max_length=50)
    filename = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    # Who wrote these rows into shared datasets and studies is kept: PROTECT refuses deleting the
    # account (deactivate it instead). None: a command's import (the operator's), or one whose
    # importer's account was deleted before this was PROTECT.
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    imported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-imported_at"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.filename}"


class ImportJob(models.Model):
    """An import run in the background (a file over ``RL_IMPORT_BACKGROUND_BYTES``): the upload is
    kept under ``MEDIA_ROOT/imports/`` until the job has run, then deleted. All or nothing like
    any import: it ends ``done`` with its ImportRecord or ``failed`` with every bad row."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Stage(models.TextChoices):
        WAITING = "waiting", "Waiting for a worker"
        READING = "reading", "Reading and checking rows"
        WRITING = "writing", "Writing"
        FINISHED = "finished", "Finished"

    # A queued job runs; a running one ends done or failed (a worker that died mid-run leaves it
    # running, and the redelivered message runs it again from the start: all or nothing). A job
    # that never ran can fail (its upload unreadable). Done and failed are final.
    STATUS = StatusMachine("status", {
        Status.QUEUED: {Status.RUNNING, Status.FAILED},
        Status.RUNNING: {Status.DONE, Status.FAILED},
    })

    kind = models.CharField(max_length=50)
    options = models.JSONField(default=dict, blank=True)
    file = models.FileField(upload_to="imports/%Y/%m/", max_length=500, blank=True)
    filename = models.CharField(max_length=500)
    size = models.PositiveBigIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=10, choices=Stage.choices, default=Stage.WAITING)
    rows_read = models.PositiveIntegerField(default=0, help_text="Records parsed so far.")
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Times a worker started it: one that kills its worker each time (out of memory) is "
                             "failed rather than started again for ever (importers.jobs.MAX_ATTEMPTS).")
    error = models.TextField(blank=True)
    errors = models.JSONField(default=list, blank=True, help_text="Every bad row: line, column, field, reason.")
    record = models.ForeignKey(ImportRecord, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # SET_NULL, unlike the record's ``imported_by``: a job is only the run (its upload is deleted), what
    # a done job wrote keeps who on its ``record``, and a job left without its researcher acts for
    # nobody (``importers.jobs._job_actor``), never as the operator.
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import job {self.pk}: {self.kind} {self.filename} ({self.status})"
