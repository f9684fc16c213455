"""LM-side records: generation jobs, question generators, parse failures and the Gen-U
answerers' predictions. The LM worker (studies.lm, studies.tasks) writes them."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from lab.transitions import StatusMachine
from studies.lm.questions import DROP_REASONS
from studies.lm.templates import DEFAULT_INSTRUCTIONS, question_demonstrations_problem

from .core import EndpointUrlChecked, GeneralizationQuestion, RationaleSource


class GenUPrediction(models.Model):
    """One answer of a Gen-U answerer to a generalization question.

    ``answerer`` is ``I`` (F^I: question only) or ``IR`` (F^IR: question plus the original
    item's rationale from ``rationale_source``). For ``I`` predictions the rationale source is
    the one whose Gen-U is being computed too, so each (question, source) pair has one of each."""

    class Answerer(models.TextChoices):
        I = "I", "F^I (question only)"  # noqa: E741
        IR = "IR", "F^IR (question and rationale)"

    generalization_question = models.ForeignKey(
        GeneralizationQuestion, on_delete=models.CASCADE, related_name="genu_predictions"
    )
    rationale_source = models.ForeignKey(RationaleSource, on_delete=models.CASCADE, related_name="genu_predictions")
    answerer = models.CharField(max_length=2, choices=Answerer.choices)
    answerer_model = models.CharField(max_length=500, help_text="Model name or path of the answerer.")
    # The rationale source that answered (the job's ``answerer_i`` / ``answerer_ir``). Null for
    # predictions written before it was recorded (and those a bundle import brings in, or whose
    # source was deleted): readers then fall back to ``answerer_model``, which two sources may share.
    answerer_source = models.ForeignKey(
        RationaleSource, null=True, blank=True, on_delete=models.SET_NULL, related_name="answered_genu_predictions",
        help_text="The rationale source that answered; empty for predictions from before it was recorded.",
    )
    # Blank when the answerer's output did not parse: such a question is left out of Gen-U.
    predicted_answer = models.CharField(max_length=50, blank=True)
    correct = models.BooleanField()
    raw_output = models.TextField(blank=True)
    # What the answerer was given, as the Gen-U job records it
    # (``studies.services.generation.genu.genu_inputs``): fingerprints of the question (text and
    # choices) and, for F^IR, of the rationale, and the answerer's checkpoint and training record.
    # Empty for predictions stored before it was recorded (and those a bundle import brings in):
    # scoring keeps them and counts them as inputs not recorded.
    inputs = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "Gen-U prediction"
        constraints = [
            models.UniqueConstraint(
                fields=["generalization_question", "rationale_source", "answerer"],
                name="genu_prediction_unique",
            )
        ]


def default_generator_decoding() -> dict:
    """SPEC section 4: five samples per type at temperature 0.7; top_p and max_new_tokens ours."""
    return {"do_sample": True, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64, "num_return_sequences": 5}


def default_generator_instructions() -> dict:
    return dict(DEFAULT_INSTRUCTIONS)


class QuestionGenerator(EndpointUrlChecked, models.Model):
    """An LM configured to write generalization questions (rephrase, similar, counterfactual).

    ``instructions`` maps each type to its instruction; ``demonstrations`` maps each type to six
    fixed demonstrations ``{"question", "context", "output", "answer"}`` (answer ``True``/``False``,
    counterfactuals included: the LM answers its own questions). For a type without demonstrations
    here, each job draws six, with ``seed``, from the dataset's train-split generalization questions
    that its researcher may read, into the job's own ``params`` (as a rationale job draws its
    source's): nothing a job draws is written here.

    ``created_by``: the researcher who made it (None: made by the operator, or before generators
    had owners). Who reads and changes it is ``studies.selectors.question_generators_for_user``."""

    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True)
    backend = models.CharField(
        max_length=20, choices=[c for c in RationaleSource.Backend.choices if c[0]], default="seq2seq"
    )
    model_name_or_path = models.CharField(max_length=500)
    endpoint_url = models.URLField(blank=True, help_text="OpenAI-compatible base URL, for the openai backend.")
    instructions = models.JSONField(default=default_generator_instructions, blank=True)
    demonstrations = models.JSONField(default=dict, blank=True)
    decoding = models.JSONField(default=default_generator_decoding, blank=True)
    seed = models.IntegerField(default=0)
    # Empty means the operator's (changed by whoever may change owner-less generators), not "unknown":
    # PROTECT refuses deleting the researcher's account (deactivate it instead), so their generator
    # never turns into the operator's.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Its researcher; empty: the operator's (made by a command, or before generators had owners).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        """Its own demonstrations are ones a job can read (``templates.question_demonstrations_problem``):
        asked by the admin's form, and again by a job that takes them."""
        super().clean()
        problem = question_demonstrations_problem(self.demonstrations or {})
        if problem:
            raise ValidationError({"demonstrations": problem[0].upper() + problem[1:] + "."})

    @property
    def origin(self) -> str:
        """What generated questions record in ``GeneralizationQuestion.origin``."""
        return f"generator:{self.name}"


class GenerationJob(models.Model):
    """One batched, resumable LM job. ``item_ids`` is frozen at creation, so ``total`` never
    moves; ``done`` counts items processed (output stored or failure recorded)."""

    class Kind(models.TextChoices):
        RATIONALES = "rationales", "Rationales"
        GENERALIZATION_QUESTIONS = "generalization_questions", "Generalization questions"
        GENU_ANSWERS = "genu_answers", "Gen-U answers (F^I and F^IR)"
        FAITHFULNESS = "faithfulness", "Faithfulness probabilities (highlights)"
        FINETUNE = "finetune", "Fine-tune T5"
        QUARK = "quark", "Quark training (reward-conditioned)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    # The params that name a rationale source by id (Gen-U answers and Quark's genu reward): the
    # job's inputs read them (``generation.inputs``), and a source they name is not deleted
    # (``content._answerer_jobs``).
    SOURCE_PARAMS = ("answerer_i", "answerer_ir")

    # Cancelled or failed jobs resume (queued again) and continue where they stopped.
    STATUS = StatusMachine("status", {
        Status.QUEUED: {Status.RUNNING, Status.CANCELLED, Status.FAILED},
        Status.RUNNING: {Status.DONE, Status.FAILED, Status.CANCELLED, Status.QUEUED},
        Status.FAILED: {Status.QUEUED},
        Status.CANCELLED: {Status.QUEUED},
    })

    kind = models.CharField(max_length=30, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    source = models.ForeignKey(
        RationaleSource, null=True, blank=True, on_delete=models.CASCADE, related_name="generation_jobs"
    )
    generator = models.ForeignKey(
        QuestionGenerator, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs"
    )
    dataset = models.ForeignKey(
        "studies.Dataset", null=True, blank=True, on_delete=models.CASCADE, related_name="generation_jobs"
    )
    split = models.CharField(max_length=10, blank=True)
    item_ids = models.JSONField(default=list, blank=True)
    batch_size = models.PositiveIntegerField(default=16)
    params = models.JSONField(default=dict, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0, help_text="Items whose output did not parse.")
    rate = models.FloatField(null=True, blank=True, help_text="Items per second over recent batches.")
    eta_seconds = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=255, blank=True)
    # The job's one live chain of messages: each message that queues the job (its creation, "Resume
    # job", beat's stalled-job check) draws it anew and carries it, and a batch whose message carries
    # another starts nothing and queues no next batch (``generation.jobs``).
    chain = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="Token of the job's live chain of messages: a message carrying another one does nothing.")
    # Starts of the batch now running, set back to 0 when a batch hands on or the job is resumed: a
    # batch that kills its worker each time (out of memory) is failed after ``MAX_BATCH_STARTS``
    # (``generation.jobs``), not redelivered and queued again by beat for ever.
    batch_starts = models.PositiveSmallIntegerField(
        default=0, editable=False, help_text="Times the batch now running was started (a killed worker's "
                                             "batch starts again).")
    # Who started the job (spent the compute and budget, and whose rights it writes under) is kept:
    # PROTECT refuses deleting the account (deactivate it instead: ``lifecycle.creator_refusal`` then
    # stops the job). None: the operator's (``by_operator``), or a row whose researcher was deleted
    # before this was PROTECT.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Started by the deployment's operator (a management command, the shell) rather than a researcher:
    # such a job stores what it makes as the operator. A job whose researcher's account was deleted
    # (``created_by`` set to NULL, before it was PROTECT) is not one: it acts for nobody
    # (``generation.common.job_actor``).
    by_operator = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(done__lte=models.F("total")), name="genjob_done_le_total"),
        ]

    def __str__(self) -> str:
        target = self.source or self.generator or ""
        return f"{self.get_kind_display()} #{self.pk} {target}".strip()

    @property
    def is_active(self) -> bool:
        return self.status in {self.Status.QUEUED, self.Status.RUNNING}

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 0.0


class GenerationFailure(models.Model):
    """An output that did not parse (or a unit that produced nothing usable), kept with its raw
    text. One per (job, item, unit): ``unit`` names the question type or answerer, empty for
    rationales."""

    job = models.ForeignKey(GenerationJob, on_delete=models.CASCADE, related_name="failures")
    item = models.ForeignKey("studies.Item", on_delete=models.CASCADE, related_name="generation_failures")
    unit = models.CharField(max_length=100, blank=True)
    raw_output = models.TextField(blank=True)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job_id", "item_id", "unit"]
        constraints = [
            models.UniqueConstraint(fields=["job", "item", "unit"], name="genfailure_unique_per_unit"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} item {self.item_id}: {self.reason[:60]}"


class DroppedQuestion(models.Model):
    """A generated generalization question the filter dropped (:mod:`studies.lm.questions`), kept
    with its reason and the text it repeats, so a researcher can see what the filter took out.
    One per (job, item, type, sample)."""

    job = models.ForeignKey(GenerationJob, on_delete=models.CASCADE, related_name="dropped_questions")
    item = models.ForeignKey("studies.Item", on_delete=models.CASCADE, related_name="dropped_questions")
    qtype = models.CharField("type", max_length=20)
    sample_index = models.PositiveIntegerField()
    text = models.TextField(blank=True)
    answer = models.CharField(max_length=50, blank=True)
    reason = models.CharField(max_length=30, choices=list(DROP_REASONS.items()))
    matched = models.TextField(blank=True, help_text="The text it repeats (the original or a kept question).")
    raw_output = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job_id", "item_id", "qtype", "sample_index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "item", "qtype", "sample_index"], name="droppedq_unique_per_sample"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} item {self.item_id} {self.qtype}#{self.sample_index}: {self.reason}"
