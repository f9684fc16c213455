"""Admin for LM generation: generators, jobs (with live progress), failures and Gen-U predictions.

The actions only collect parameters and call the services (``generation_job_create``,
``generation_job_cancel``, ``generation_job_resume``, ``finetune_t5``), which check the user's
right themselves (starting a job needs ``studies.add_generationjob``); the work runs on the
``lm`` Celery queue. "Generate rationales" (and the Gen-U answers and faithfulness jobs) is added to the rationale source admin and "Fine-tune
T5" to the dataset admin from here, so ``studies/admin/core.py`` stays untouched. LM output is
shown through Django's auto-escaping only.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from studies.admin.display import short_text
from studies.admin.model_path_form import with_model_path_check
from studies.admin.scoping import LookupGuardAdmin
from studies.lm.questions import DROP_REASONS
from studies.models import (
    Dataset,
    DroppedQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    QuestionGenerator,
    RationaleSource,
    Split,
)
from studies.selectors import (
    CHANGE,
    VIEW,
    datasets_for_user,
    generation_jobs_for_user,
    genu_predictions_for_user,
    question_generators_for_user,
    sources_for_user,
)
from studies.services.generation import (
    GenerationError,
    finetune_t5,
    generation_job_cancel,
    generation_job_create,
    generation_job_resume,
)
from studies.services.generation.common import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, decoding_from
from studies.services.generation.faithfulness import Y_HAT_FROM_DEFAULT, Y_HAT_FROM_TEXT
from studies.services.generation.finetune import DEFAULT_PRESETS, MODES, PRESETS
from studies.services.generation.genu import VALIDATED_ONLY_READING
from studies.services.generation.jobs import already_queued_message, generation_job_start_check
from studies.services.model_paths import model_path_stored

REFRESH_SECONDS = 5


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def progress_html(job: GenerationJob):
    return format_html(
        '<progress value="{}" max="{}" style="width:9em"></progress> {} / {} ({}%)',
        job.done, job.total or 1, job.done, job.total, f"{job.percent:.0f}",
    )


# --- forms for the intermediate action pages --------------------------------------------------
class _UserForm(forms.Form):
    """An action page's form, built for the user who sends it (``user``): its pickers offer only
    what that user may read, as the API does."""

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user


class _JobForm(_UserForm):
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none())
    split = forms.ChoiceField(choices=[("", "all splits"), *Split.choices], required=False, initial="dev")
    limit = forms.IntegerField(min_value=1, required=False, help_text="First N items by id; empty takes all.")
    batch_size = forms.IntegerField(min_value=1, max_value=MAX_BATCH_SIZE, initial=DEFAULT_BATCH_SIZE)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, user=user, **kwargs)
        self.fields["dataset"].queryset = datasets_for_user(user=user)


class GenerateRationalesForm(_JobForm):
    max_requests = forms.IntegerField(min_value=1, required=False, help_text="Budget cap (openai backend).")
    max_tokens = forms.IntegerField(min_value=1, required=False, help_text="Budget cap (openai backend).")


class GenerateQuestionsForm(_JobForm):
    max_requests = forms.IntegerField(min_value=1, required=False, help_text="Budget cap (openai backend).")


class GenUAnswersForm(_JobForm):
    answerer_i = forms.ModelChoiceField(queryset=RationaleSource.objects.none(),
                                        label="F^I answerer (question only)")
    answerer_ir = forms.ModelChoiceField(queryset=RationaleSource.objects.none(),
                                         label="F^IR answerer (question and rationale)")
    include_unvalidated = forms.BooleanField(
        required=False, label="Include unvalidated questions",
        help_text=f"Off (the default): {VALIDATED_ONLY_READING}. On: also questions nobody validated; the score "
                  "report says so.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, user=user, **kwargs)
        for name in ("answerer_i", "answerer_ir"):
            self.fields[name].queryset = sources_for_user(user=user).filter(kind="lm")


class FaithfulnessForm(_JobForm):
    task_model = forms.CharField(max_length=500, required=False, help_text=(
        "The task model's folder, hub name or .gguf file, as the lm worker sees it; y_hat then comes from the full "
        "input (ERASER), which departs from SPEC section 6 (y_hat predicted from the highlight) unless y_hat_from "
        "below says highlight. Empty: the highlight source's own model, y_hat from the highlight pass "
        "(select-then-predict)."))
    task_backend = forms.ChoiceField(required=False, choices=[("", "the source's own backend"),
        ("classifier", "sequence classification (its classes named by the choice labels)"),
        ("seq2seq", "seq2seq (T5-style), scoring the label words"),
        ("causal", "causal (GPT-style), scoring the label words"),
    ])
    # The rules and the default are faithfulness_params' own (Y_HAT_FROM_TEXT, Y_HAT_FROM_DEFAULT).
    y_hat_from = forms.ChoiceField(required=False, label="y_hat from",
                                   choices=[("", f"the default: {Y_HAT_FROM_DEFAULT}"), *Y_HAT_FROM_TEXT.items()])


class FinetuneForm(_UserForm):
    mode = forms.ChoiceField(choices=list(MODES.items()))
    preset = forms.ChoiceField(
        choices=[("", "the mode's default: " + ", ".join(f"{m} {p}" for m, p in DEFAULT_PRESETS.items()))]
        + [(k, f"{k}: {v['description']}") for k, v in PRESETS.items()],
        required=False, help_text="Fields left empty take the preset's value.")
    base_model = forms.CharField(help_text="Model name (e.g. t5-base) or a folder on the worker.")
    split = forms.ChoiceField(choices=Split.choices, initial="train")
    n_shot = forms.IntegerField(min_value=1, required=False, help_text="Empty: the preset's (full split or 48).")
    epochs = forms.IntegerField(min_value=1, required=False)
    batch_size = forms.IntegerField(min_value=1, required=False)
    lr = forms.FloatField(min_value=0, required=False)
    seed = forms.IntegerField(required=False)
    output_name = forms.CharField(required=False, help_text="Name of the registered source; empty picks one.")


def _action_page(modeladmin, request, queryset, *, form_class, title, action, submit, run):
    """Show ``form_class`` for the selected rows; on submit call ``run(obj, data)`` for each. A user
    who may not start LM jobs is told so before any form (the service refuses them anyway: the
    action's own ``change`` right on the row is not the right to start a job)."""
    try:
        generation_job_start_check(user=request.user)
    except GenerationError as exc:
        modeladmin.message_user(request, str(exc), messages.ERROR)
        return None
    if "apply" in request.POST:
        form = form_class(request.POST, user=request.user)
        if form.is_valid():
            for obj in queryset:
                try:
                    job = run(obj, form.cleaned_data, request.user)
                except GenerationError as exc:
                    modeladmin.message_user(request, f"{obj}: {exc}", messages.ERROR)
                    continue
                url = reverse("admin:studies_generationjob_change", args=[job.pk])
                if job.already_queued:
                    modeladmin.message_user(request, format_html(
                        '{}: <a href="{}">{}</a>', obj, url, already_queued_message(job)), messages.WARNING)
                    continue
                modeladmin.message_user(
                    request, format_html('Queued <a href="{}">job {}</a> for {} ({} units).', url, job.pk, obj,
                                         job.total), messages.SUCCESS)
            return None
    else:
        form = form_class(user=request.user)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title, "form": form, "queryset": queryset, "action": action, "submit": submit,
        "opts": modeladmin.model._meta, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/studies/lm/action_form.html", context)


def _budget(data: dict) -> dict:
    return {k: data[k] for k in ("max_requests", "max_tokens") if data.get(k)}


@admin.action(description="Generate rationales", permissions=["change"])
def generate_rationales(modeladmin, request, queryset):
    def run(source, data, user):
        return generation_job_create(kind="rationales", source=source, dataset=data["dataset"], split=data["split"],
                                     limit=data["limit"], batch_size=data["batch_size"], params=_budget(data),
                                     user=user)

    return _action_page(modeladmin, request, queryset, form_class=GenerateRationalesForm,
                        title="Generate rationales", action="generate_rationales", submit="Queue generation", run=run)


@admin.action(description="Compute Gen-U answers (F^I and F^IR)", permissions=["change"])
def generate_genu_answers(modeladmin, request, queryset):
    def run(source, data, user):
        return generation_job_create(
            kind="genu_answers", source=source, dataset=data["dataset"], split=data["split"], limit=data["limit"],
            batch_size=data["batch_size"], user=user,
            params={"answerer_i": data["answerer_i"].pk, "answerer_ir": data["answerer_ir"].pk,
                    "only_valid": not data["include_unvalidated"]})

    return _action_page(modeladmin, request, queryset, form_class=GenUAnswersForm,
                        title="Gen-U answers", action="generate_genu_answers", submit="Queue answering", run=run)


@admin.action(description="Compute faithfulness probabilities (task model on highlights)", permissions=["change"])
def generate_faithfulness(modeladmin, request, queryset):
    def run(source, data, user):
        return generation_job_create(
            kind="faithfulness", source=source, dataset=data["dataset"], split=data["split"], limit=data["limit"],
            batch_size=data["batch_size"], user=user,
            params={"task_model": data["task_model"].strip(), "task_backend": data["task_backend"],
                    "y_hat_from": data["y_hat_from"]})

    return _action_page(modeladmin, request, queryset, form_class=FaithfulnessForm,
                        title="Faithfulness probabilities", action="generate_faithfulness",
                        submit="Queue the task model", run=run)


@admin.action(description="Fine-tune T5 on this dataset", permissions=["change"])
def finetune_on_dataset(modeladmin, request, queryset):
    def run(dataset, data, user):
        return finetune_t5(dataset=dataset, mode=data["mode"], base_model=data["base_model"], split=data["split"],
                           preset=data["preset"] or None, n_shot=data["n_shot"], epochs=data["epochs"], batch_size=data["batch_size"], lr=data["lr"],
                           seed=data["seed"], output_name=data["output_name"] or None, user=user, run_now=False)

    return _action_page(modeladmin, request, queryset, form_class=FinetuneForm, title="Fine-tune T5",
                        action="finetune_on_dataset", submit="Queue fine-tuning", run=run)


def _add_actions(model, *actions) -> None:
    """Add actions to another module's ModelAdmin (registered before this module is imported)."""
    model_admin = admin.site._registry.get(model)
    if model_admin is None:
        return
    existing = list(model_admin.actions or [])
    model_admin.actions = existing + [a for a in actions if a not in existing]


_add_actions(RationaleSource, generate_rationales, generate_genu_answers, generate_faithfulness)
_add_actions(Dataset, finetune_on_dataset)


# --- generators -------------------------------------------------------------------------------
def _with_decoding_check(form: type[forms.ModelForm]) -> type[forms.ModelForm]:
    """``form`` whose ``decoding`` is refused, on the field, by the rule each job on the generator
    reads it with (``common.decoding_from``, with its message), as a rationale source's is when
    saved (``content.source_prompt_problems``). Before, a value no job could use was stored and
    failed every job; one the database cannot store (NaN) was a server error. An unchanged decoding
    of a saved generator is not asked again: its next job refuses it, as a source's."""

    class DecodingForm(form):
        def clean_decoding(self):
            decoding = self.cleaned_data.get("decoding")
            if self.instance.pk is None or decoding != self.initial.get("decoding"):
                try:
                    decoding_from(decoding)
                except GenerationError as exc:
                    raise forms.ValidationError(str(exc)) from exc
            return decoding

    DecodingForm.__name__ = form.__name__
    return DecodingForm


@admin.register(QuestionGenerator)
class QuestionGeneratorAdmin(LookupGuardAdmin):
    """The generators the user may read (``question_generators_for_user``, as the API looks them
    up): another's pages answer as missing ones do; editing and deleting need CHANGE access (the
    user's own, or an owner-less one they read); a new generator is its maker's."""

    list_display = ["name", "backend", "model_name_or_path", "n_demonstrations", "created_by", "updated_at"]
    list_filter = ["backend"]
    search_fields = ["name", "model_name_or_path"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    actions = ["generate_questions"]
    fieldsets = [
        (None, {"fields": ["name", "description", "backend", "model_name_or_path", "endpoint_url", "seed"]}),
        ("Prompts", {"fields": ["instructions", "demonstrations"], "description":
            "instructions: {type: text} for rephrase, similar and counterfactual. demonstrations: {type: [six "
            "{question, context, output, answer}]}, answer True/False (every type: the LM answers its own "
            "questions, and they stay unvalidated until checked). For types left empty, each job draws six "
            "from the dataset's train generalization questions that its researcher may read, into the job "
            "(its params say where from); nothing drawn is saved here."}),
        ("Decoding", {"fields": ["decoding"], "description": "Default: 5 samples at temperature 0.7."}),
        (None, {"fields": ["created_by", "created_at", "updated_at"]}),
    ]

    def get_queryset(self, request):
        visible = question_generators_for_user(user=request.user, access=VIEW).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)

    def _reaches(self, request, obj, access: str) -> bool:
        return obj is None or obj.pk is None or question_generators_for_user(
            user=request.user, access=access).filter(pk=obj.pk).exists()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._reaches(request, obj, VIEW)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._reaches(request, obj, CHANGE)

    def has_delete_permission(self, request, obj=None):
        # Deleting a generator deletes its jobs (running ones included, past the cancel rule) and
        # their records: one that ever ran a job stays.
        if obj is not None and obj.jobs.exists():
            return False
        return super().has_delete_permission(request, obj) and self._reaches(request, obj, CHANGE)

    def delete_queryset(self, request, queryset):
        if queryset.filter(jobs__isnull=False).exists():
            raise PermissionDenied("A question generator that ran a job is not deleted: its jobs are the record.")
        changeable = question_generators_for_user(user=request.user, access=CHANGE).values("pk")
        if queryset.exclude(pk__in=changeable).exists():
            raise PermissionDenied("Only your own question generators (or ones without an owner) are yours to delete.")
        super().delete_queryset(request, queryset)

    def get_form(self, request, obj=None, change=False, **kwargs):
        # A generator's model is loaded by every job on it, so it is no way into another researcher's
        # checkpoint: the sources' rule, and generation_job_inputs_check asks it again for each job.
        return _with_decoding_check(
            with_model_path_check(super().get_form(request, obj, change=change, **kwargs), user=request.user))

    def save_model(self, request, obj, form, change):
        if not change:  # a new generator is its maker's
            obj.created_by = request.user
        # a folder under RL_MODEL_DIR is kept relative to it, as sources' are (``model_path_stored``)
        obj.model_name_or_path = model_path_stored(obj.model_name_or_path)
        super().save_model(request, obj, form, change)

    @admin.display(description="demonstrations")
    def n_demonstrations(self, obj):
        return (", ".join(f"{k} {len(v)}" for k, v in (obj.demonstrations or {}).items())
                or "drawn for each job")

    @admin.action(description="Generate generalization questions", permissions=["change"])
    def generate_questions(self, request, queryset):
        def run(generator, data, user):
            return generation_job_create(kind="generalization_questions", generator=generator,
                                         dataset=data["dataset"], split=data["split"], limit=data["limit"],
                                         batch_size=data["batch_size"], params=_budget(data), user=user)

        return _action_page(self, request, queryset, form_class=GenerateQuestionsForm,
                            title="Generate generalization questions", action="generate_questions",
                            submit="Queue generation", run=run)


# --- jobs -------------------------------------------------------------------------------------
class ReadOnlyAdmin(LookupGuardAdmin):
    """What the LM jobs write (jobs, their failures and dropped questions, Gen-U predictions) is
    read here, never edited or deleted: a job stops through ``generation_job_cancel`` (which checks
    who may), a deleted prediction would change the next Gen-U score of every study that reads it,
    and a failure or a dropped question is the record of why a row was not stored."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(GenerationJob)
class GenerationJobAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "target", "status", "progress", "rate_display", "eta_display", "failed",
                    "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["source", "generator", "dataset"]
    search_fields = ["source__name", "generator__name", "error"]
    actions = ["cancel_jobs", "resume_jobs"]
    change_list_template = "admin/studies/lm/generationjob_change_list.html"
    change_form_template = "admin/studies/lm/generationjob_change_form.html"
    readonly_fields = ["kind", "status", "target", "dataset", "split", "progress", "rate_display", "eta_display",
                       "failed", "failures_link", "started_at", "finished_at", "cancel_requested", "error",
                       "batch_size", "params", "celery_task_id", "created_by", "created_at", "updated_at"]
    fields = readonly_fields

    @admin.display(description="for")
    def target(self, obj):
        return obj.source or obj.generator or obj.dataset or "—"

    @admin.display(description="progress")
    def progress(self, obj):
        return progress_html(obj)

    @admin.display(description="rate")
    def rate_display(self, obj):
        return "—" if obj.rate is None else f"{obj.rate:.2f}/s"

    @admin.display(description="ETA")
    def eta_display(self, obj):
        return _duration(obj.eta_seconds) if obj.is_active else "—"

    @admin.display(description="training report")
    def training_report(self, obj):
        from .quark import quark_report_html

        return quark_report_html(obj.params or {})

    def get_queryset(self, request):
        # The jobs the user may read (``generation_jobs_for_user``), as the API lists them.
        visible = generation_jobs_for_user(user=request.user, access=VIEW).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if obj is not None and obj.kind == GenerationJob.Kind.QUARK:
            fields.insert(fields.index("params"), "training_report")
        if obj is not None and obj.kind == GenerationJob.Kind.GENERALIZATION_QUESTIONS:
            fields.insert(fields.index("failures_link") + 1, "dropped_link")
        return fields

    @admin.display(description="dropped by the filter")
    def dropped_link(self, obj):
        counts = (obj.params or {}).get("dropped") or {}
        url = reverse("admin:studies_droppedquestion_changelist") + f"?job__id__exact={obj.pk}"
        why = "; ".join(f"{DROP_REASONS.get(reason, reason)}: {n}" for reason, n in counts.items())
        return format_html('<a href="{}">{} dropped samples</a>{}', url, sum(counts.values()), f" ({why})" if why else "")

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    @admin.display(description="failures")
    def failures_link(self, obj):
        url = reverse("admin:studies_generationfailure_changelist") + f"?job__id__exact={obj.pk}"
        return format_html('<a href="{}">{} failure rows</a>', url, obj.failures.count())

    def changelist_view(self, request, extra_context=None):
        # Only the jobs the list shows (get_queryset): another researcher's running job is not theirs to see.
        active = self.get_queryset(request).filter(status__in=["queued", "running"]).exists()
        extra = {"refresh_seconds": REFRESH_SECONDS if active else None, **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = GenerationJob.objects.filter(pk=object_id).first()
        extra = {"refresh_seconds": REFRESH_SECONDS if job and job.is_active else None, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def _each_job(self, request, queryset, service, done_message: str) -> None:
        """``service(job=..., user=...)`` on each selected job (the service checks that the user may
        act on it), each refusal (GenerationError) a warning;
        then ``done_message`` (``{done}``: how many it worked on) when any did."""
        done = 0
        for job in queryset:
            try:
                service(job=job, user=request.user)
                done += 1
            except GenerationError as exc:
                self.message_user(request, str(exc), messages.WARNING)
        if done:
            self.message_user(request, done_message.format(done=done))

    @admin.action(description="Cancel job")
    def cancel_jobs(self, request, queryset):
        self._each_job(request, queryset, generation_job_cancel,
                       "Cancelled {done} job(s); running ones stop after their current batch.")

    @admin.action(description="Resume job (continues where it stopped)")
    def resume_jobs(self, request, queryset):
        self._each_job(request, queryset, generation_job_resume, "Queued {done} job(s) again.")


class _JobRecordAdmin(ReadOnlyAdmin):
    """What a job wrote about its items (failures, dropped questions): the rows of the jobs the user
    may read (``generation_jobs_for_user``, as the job list), the rest answering as missing ones do;
    the job filter lists only the jobs of the rows shown."""

    def get_queryset(self, request):
        visible = generation_jobs_for_user(user=request.user, access=VIEW).values("pk")
        return super().get_queryset(request).filter(job__in=visible)

    def has_view_permission(self, request, obj=None):
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self.get_queryset(request).filter(pk=obj.pk).exists())

    @admin.display(description="item", ordering="item__external_id")
    def item_display(self, obj):  # the item a row is about, by its external id
        return obj.item.external_id


@admin.register(GenerationFailure)
class GenerationFailureAdmin(_JobRecordAdmin):
    list_display = ["job", "item_display", "unit", "reason", "raw_short", "created_at"]
    list_filter = ["job__kind", ("job", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["reason", "raw_output", "item__external_id"]
    list_select_related = ["job", "item"]
    fields = ["job", "item", "unit", "reason", "raw_output", "created_at"]
    readonly_fields = fields

    @admin.display(description="raw output")
    def raw_short(self, obj):
        return format_html("<code>{}</code>", short_text(obj.raw_output, 120))


@admin.register(DroppedQuestion)
class DroppedQuestionAdmin(_JobRecordAdmin):
    """Every generated question the filter dropped, with its reason and the text it repeats."""

    list_display = ["job", "item_display", "qtype", "sample_index", "text_short", "reason", "matched_short"]
    list_filter = ["reason", "qtype", ("job", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["text", "matched", "item__external_id"]
    list_select_related = ["job", "item"]
    fields = ["job", "item", "qtype", "sample_index", "text", "answer", "reason", "matched", "raw_output", "created_at"]
    readonly_fields = fields

    @admin.display(description="question")
    def text_short(self, obj):
        return short_text(obj.text, 120)

    @admin.display(description="repeats")
    def matched_short(self, obj):
        return short_text(obj.matched, 120)


@admin.register(GenUPrediction)
class GenUPredictionAdmin(ReadOnlyAdmin):
    """The predictions whose question and source the user may read (``genu_predictions_for_user``);
    the others' pages answer as missing ones do, and the source filter lists only the sources shown."""

    list_display = ["question_short", "rationale_source", "answerer", "predicted_answer", "gold", "correct"]
    list_filter = ["answerer", "correct", ("rationale_source", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["generalization_question__text", "raw_output"]
    list_select_related = ["generalization_question", "rationale_source"]
    fields = ["generalization_question", "rationale_source", "answerer", "answerer_model", "answerer_source_shown",
              "predicted_answer", "correct", "raw_output", "created_at"]
    readonly_fields = fields

    def get_queryset(self, request):
        visible = genu_predictions_for_user(user=request.user).values("pk")
        readable = sources_for_user(user=request.user).filter(pk=OuterRef("answerer_source_id"))
        return super().get_queryset(request).filter(pk__in=visible).annotate(answerer_source_readable=Exists(readable))

    @admin.display(description="answerer source")
    def answerer_source_shown(self, obj):
        """The source that answered, named only to a user who may read it (``sources_for_user``):
        another researcher's source name is theirs; the model path is shown either way."""
        if obj.answerer_source_id is None:
            return "not recorded (an older prediction: only its model path is)"
        if not getattr(obj, "answerer_source_readable", False):
            return "a source you may not read"
        return obj.answerer_source.name

    def has_view_permission(self, request, obj=None):
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self.get_queryset(request).filter(pk=obj.pk).exists())

    @admin.display(description="question")
    def question_short(self, obj):
        return short_text(obj.generalization_question.text)

    @admin.display(description="gold")
    def gold(self, obj):
        return obj.generalization_question.answer
