"""Admin for datasets, items, sources, rationales, generalization questions, studies and imports.

Writes go through the services: the study form calls ``study_create`` / ``study_update`` (the
study admin and its open / close actions live in ``cockpit.admin``), the actions here call
``generalization_questions_set_validation``, the "Import data" page calls the importers and
lists every bad row of a refused file, and edits and deletions of datasets, items, sources,
rationales and generalization questions go through ``studies.services.content``
(``ContentAdmin``): a row used by a study the user may not change is theirs to read at most, and
what an open or closed study shows its workers and its scores read stays fixed."""
from __future__ import annotations

import copy

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.forms.models import construct_instance
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from studies.admin.display import short_text
from studies.admin.import_messages import import_message
from studies.admin.model_path_form import with_model_path_check
from studies.admin.scoping import LookupGuardAdmin
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    ImportJob,
    ImportRecord,
    Item,
    Rationale,
    RationaleSource,
    Split,
)
from studies.selectors import (
    datasets_counted_for_user,
    datasets_for_user,
    datasets_to_import_into,
    generalization_questions_for_user,
    import_jobs_for_user,
    import_records_for_user,
    items_for_user,
    rationales_for_user,
    sources_counted_for_user,
    sources_for_user,
)
from studies.services.content import (
    PARENT_SELECTORS,
    ContentChangeRefused,
    content_change_problems,
    content_row_save,
    content_row_value_problems,
    content_rows_delete,
)
from studies.services.importers import (
    IMPORT_KINDS,
    ImportValidationError,
    ItemColumns,
    RationaleColumns,
    import_run,
)
from studies.services.importers.jobs import import_in_background, import_job_create
from studies.services.questions import QuestionError, generalization_questions_set_validation


class ContentAdmin(LookupGuardAdmin):
    """The admin of a shared content model: every edit and deletion goes through
    ``studies.services.content`` (the one owner of the rule). A row used by a study the user may
    not change has no change or delete permission here (its pages are read-only, a POST answers
    403); an edit of what an open or closed study shows is a form error naming the study; a
    deletion of a row such a study uses is listed as not allowed on the confirmation page; a new
    row that a study the user may not change would use is not added (a message says why).

    What it lists, searches, filters on and opens is the model's selector (``SELECTORS``, as the
    API reads them): Django opens an admin page to the view *or* the change permission, and a
    researcher who may change rows but not read all of them sees only those the studies they may
    see use; another row's pages answer as a missing one does, and a relation's list filter offers
    only the values of the rows shown. A row's dataset, item and source are chosen among those the
    user may build on (``content.PARENT_SELECTORS``: not one read only through a view share), with
    the autocomplete widget, whose search is the parent's admin and so its selector, narrowed to those
    (a raw-id widget would label any id it is given), plus the one an edited row already has;
    ``content_row_save`` refuses any other, as a missing one. Its list's address filters
    by its list filters only (``LookupGuardAdmin``): ``?studies=<id>`` would tell what a hidden study
    draws."""

    SELECTORS = {
        Dataset: datasets_for_user,
        Item: items_for_user,
        RationaleSource: sources_for_user,
        Rationale: rationales_for_user,
        GeneralizationQuestion: generalization_questions_for_user,
    }

    def _visible(self, request):
        return self.SELECTORS[self.model](user=request.user)

    def _is_visible(self, request, obj) -> bool:
        return obj is None or obj.pk is None or self._visible(request).filter(pk=obj.pk).exists()

    def _listed(self, request):
        # What the list shows: the visible rows, with whatever the admin counts per row
        # (``DatasetAdmin``, ``RationaleSourceAdmin``: their selector's counts, never the whole row's).
        return self._visible(request)

    def get_ordering(self, request):
        # The model's order unless the admin names one, given to the queryset itself: the
        # autocomplete search pages whatever ``get_queryset`` gives.
        return super().get_ordering(request) or self.model._meta.ordering

    def get_queryset(self, request):
        qs = self._listed(request)
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs

    def get_list_filter(self, request):
        related = admin.RelatedOnlyFieldListFilter
        return [(entry, related) if isinstance(entry, str) and _is_relation(self.model, entry) else entry
                for entry in super().get_list_filter(request)]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        selector = PARENT_SELECTORS.get(db_field.related_model)
        if selector is not None and "queryset" not in kwargs:
            kwargs["queryset"] = selector(user=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_search_results(self, request, queryset, search_term):
        # The autocomplete search of a content row's parent field offers what the field accepts.
        queryset, distinct = super().get_search_results(request, queryset, search_term)
        match = request.resolver_match
        if (match is not None and match.url_name == "autocomplete" and self.model in PARENT_SELECTORS
                and request.GET.get("model_name") in {m._meta.model_name for m in self.SELECTORS}):
            queryset = queryset.filter(pk__in=PARENT_SELECTORS[self.model](user=request.user).values("pk"))
        return queryset, distinct

    def _problems(self, request, changes):
        return content_change_problems(user=request.user, model=self.model, changes=changes)

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._is_visible(request, obj)

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj) and self._is_visible(request, obj)
        return allowed and (obj is None or obj.pk is None or not self._problems(request, {obj.pk: ()})[0])

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj) and self._is_visible(request, obj)
        return allowed and (obj is None or obj.pk is None or not self._problems(request, {obj.pk: None})[0])

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        problems = self._problems

        class ContentForm(form):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                for name, field in self.fields.items():  # an edited row keeps the parent it has
                    parent_id = getattr(self.instance, f"{name}_id", None) if self.instance.pk else None
                    queryset = getattr(field, "queryset", None)
                    if parent_id is not None and queryset is not None and queryset.model in PARENT_SELECTORS:
                        field.queryset = queryset | queryset.model.objects.filter(pk=parent_id)

            def clean(self):
                cleaned = super().clean()
                if self.instance.pk is not None and self.changed_data:
                    not_yours, fixed = problems(request, {self.instance.pk: self.changed_data})
                    for reason in [*not_yours.values(), *fixed.values()]:
                        self.add_error(None, reason + ".")
                # The import rules (content_row_save asks them again when the row is written), asked
                # of the row as the save builds it, so that the page shows what was typed and each
                # reason beside its field.
                row = construct_instance(self, copy.copy(self.instance), self._meta.fields, self._meta.exclude)
                changed = None if self.instance.pk is None else self.changed_data
                for field, reason in content_row_value_problems(obj=row, changed=changed).items():
                    if field not in self.errors:  # a field the form refused already keeps that reason
                        self.add_error(field if field in self.fields else None, reason)
                return cleaned

        ContentForm.__name__ = form.__name__
        return ContentForm

    def get_deleted_objects(self, objs, request):
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        not_yours, fixed = self._problems(request, dict.fromkeys(obj.pk for obj in objs))
        perms_needed = set(perms_needed) | {reason for reason in [*not_yours.values(), *fixed.values()]}
        return deleted, model_count, perms_needed, protected

    def save_model(self, request, obj, form, change):
        content_row_save(user=request.user, obj=obj, changed=form.changed_data if change else ())

    def delete_model(self, request, obj):
        content_rows_delete(user=request.user, model=self.model, pks=[obj.pk])

    def delete_queryset(self, request, queryset):
        content_rows_delete(user=request.user, model=self.model, pks=list(queryset.values_list("pk", flat=True)))

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ContentChangeRefused as exc:  # a new row another's study would use, or a study opened meanwhile
            self.message_user(request, str(exc) + ".", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def changelist_view(self, request, extra_context=None):
        try:
            return super().changelist_view(request, extra_context)
        except ContentChangeRefused as exc:  # the delete action, as above
            self.message_user(request, str(exc) + ".", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ContentChangeRefused as exc:  # as above, between the confirmation page and the write
            self.message_user(request, str(exc) + ".", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


def _is_relation(model, path: str) -> bool:
    try:
        return get_fields_from_path(model, path)[-1].is_relation
    except (FieldDoesNotExist, NotRelationField):
        return False


# ---------------------------------------------------------------------------------------------
# Datasets and items


@admin.register(Dataset)
class DatasetAdmin(ContentAdmin):
    list_display = ["name", "task_format", "n_items", "n_train", "n_dev", "n_test", "created_at"]
    list_filter = ["task_format"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at", "updated_at"]

    def _listed(self, request):
        # The items the user may read, as the API counts them: a view share reads the study's items,
        # not the rest of its dataset.
        return datasets_counted_for_user(user=request.user, splits=(Split.TRAIN, Split.DEV, Split.TEST))

    @admin.display(description="items", ordering="n_items")
    def n_items(self, obj):
        return obj.n_items

    @admin.display(description="train")
    def n_train(self, obj):
        return obj.n_train

    @admin.display(description="dev")
    def n_dev(self, obj):
        return obj.n_dev

    @admin.display(description="test")
    def n_test(self, obj):
        return obj.n_test


@admin.register(Item)
class ItemAdmin(ContentAdmin):
    list_display = ["external_id", "question_short", "dataset", "split", "gold_answer", "has_gold_rationale"]
    list_filter = ["dataset", "split", "gold_answer"]
    search_fields = ["external_id", "question"]
    autocomplete_fields = ["dataset"]
    readonly_fields = ["created_at", "updated_at"]
    list_select_related = ["dataset"]
    list_per_page = 50

    @admin.display(description="question")
    def question_short(self, obj):
        return short_text(obj.question)

    @admin.display(description="gold rationale", boolean=True)
    def has_gold_rationale(self, obj):
        return bool(obj.gold_rationale)


# ---------------------------------------------------------------------------------------------
# Sources and rationales


@admin.register(RationaleSource)
class RationaleSourceAdmin(ContentAdmin):
    list_display = ["name", "kind", "backend", "model_name_or_path", "n_rationales", "created_at"]
    list_filter = ["kind", "backend", "has_highlights"]
    search_fields = ["name", "description", "model_name_or_path"]
    readonly_fields = ["created_at", "updated_at"]

    def _listed(self, request):
        # The rationales the user may read (``rationales_for_user``), not every one of the source.
        return sources_counted_for_user(user=request.user)

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The rule jobs load models by, beside the field; content_row_save asks it again when the row is written.
        return with_model_path_check(super().get_form(request, obj, change=change, **kwargs), user=request.user)

    @admin.display(description="rationales", ordering="n_rationales")
    def n_rationales(self, obj):
        return obj.n_rationales


@admin.register(Rationale)
class RationaleAdmin(ContentAdmin):
    list_display = ["item_id_display", "source", "text_short", "predicted_answer", "prediction_correct"]
    list_filter = ["source", "prediction_correct", "item__dataset", "item__split"]
    search_fields = ["text", "item__external_id", "item__question", "source__name"]
    autocomplete_fields = ["item", "source"]
    # Derived from the predicted answer and the item's gold answer (``grading.prediction_correct``),
    # set again by ``content_row_save`` when either changes: shown, never typed.
    readonly_fields = ["prediction_correct", "created_at", "updated_at"]
    list_select_related = ["item", "source"]
    list_per_page = 50

    @admin.display(description="item", ordering="item__external_id")
    def item_id_display(self, obj):
        return obj.item.external_id

    @admin.display(description="rationale")
    def text_short(self, obj):
        return short_text(obj.text)


@admin.register(GeneralizationQuestion)
class GeneralizationQuestionAdmin(ContentAdmin):
    list_display = ["text_short", "qtype", "answer", "validation_status", "original", "origin"]
    list_filter = ["qtype", "validation_status", "answer", "item__dataset", "item__split"]
    search_fields = ["text", "item__question", "item__external_id", "origin"]
    autocomplete_fields = ["item"]
    # Set by the actions below only, which record who changed it and when (a form's edit would not).
    readonly_fields = ["validation_status", "created_at", "updated_at"]
    list_select_related = ["item"]
    actions = ["mark_valid", "mark_invalid", "mark_unvalidated"]
    list_per_page = 50

    @admin.display(description="question")
    def text_short(self, obj):
        return short_text(obj.text)

    @admin.display(description="original question", ordering="item__external_id")
    def original(self, obj):
        return short_text(obj.item.question, 60)

    def _set(self, request, queryset, status):
        try:
            changed = generalization_questions_set_validation(user=request.user, questions=queryset, status=status)
        except (ContentChangeRefused, QuestionError) as exc:
            self.message_user(request, f"Nothing marked: {exc}.", messages.ERROR)
            return
        for question in changed:  # the admin's history of each question, beside metadata["validation"]
            previous = question.metadata["validation"]["previous"]
            self.log_change(request, question, f"Validation status changed from {previous} to {status}.")
        self.message_user(request, f"{len(changed)} question(s) marked {status}.", messages.SUCCESS)

    @admin.action(description="Mark selected questions valid", permissions=["change"])
    def mark_valid(self, request, queryset):
        self._set(request, queryset, GeneralizationQuestion.Validation.VALID)

    @admin.action(description="Mark selected questions invalid", permissions=["change"])
    def mark_invalid(self, request, queryset):
        self._set(request, queryset, GeneralizationQuestion.Validation.INVALID)

    @admin.action(description="Mark selected questions unvalidated", permissions=["change"])
    def mark_unvalidated(self, request, queryset):
        self._set(request, queryset, GeneralizationQuestion.Validation.UNVALIDATED)


# ---------------------------------------------------------------------------------------------
# Imports


class ImportForm(forms.Form):
    kind = forms.ChoiceField(choices=[(k, label) for k, (label, _) in IMPORT_KINDS.items()])
    file = forms.FileField()
    dataset = forms.CharField(
        max_length=200, required=False, widget=forms.TextInput(attrs={"list": "rl-datasets"}),
        help_text="Dataset name. Default: StrategyQA / OpenBookQA for those imports; required otherwise "
                  "(rationales and generalization questions go to the dataset of their questions).",
    )
    split = forms.ChoiceField(
        choices=[("", "from the file name / all")] + list(Split.choices), required=False,
        help_text="Questions: the split they belong to. Rationales and generalization: match only this split.",
    )
    source = forms.CharField(
        max_length=200, required=False,
        help_text="Rationales: put every row under this source (for a one-model file without a source column).",
    )
    task_format = forms.ChoiceField(
        choices=[("", "the dataset's")] + list(Dataset.TaskFormat.choices), required=False,
        help_text="Generic items: needed when the dataset is new.",
    )
    choice_labels = forms.CharField(required=False, help_text="Generic items: option labels, e.g. a,b,c,d.")
    columns = forms.CharField(
        required=False,
        help_text="Generic items and rationales: column mapping as role=column pairs, e.g. "
                  "id=qid, question=text, answer=label (items roles: id, question, answer, choices, rationale, "
                  "split; rationale roles: item_id, question, source, rationale, predicted_answer, gold_answer).",
    )
    validation_status = forms.ChoiceField(
        choices=[("", "leave as is")] + list(GeneralizationQuestion.Validation.choices), required=False,
        help_text="Generalization questions: set this status on every question of the file.",
    )

    ITEM_ROLES = {"id", "question", "answer", "choices", "rationale", "split"}
    RATIONALE_ROLES = {"item_id", "question", "source", "rationale", "predicted_answer", "gold_answer"}

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind in ("items", "rationales", "generalization") and not data.get("dataset"):
            self.add_error("dataset", "Name the dataset.")
        mapping: dict[str, str] = {}
        for part in (data.get("columns") or "").split(","):
            if not part.strip():
                continue
            if "=" not in part:
                self.add_error("columns", f"{part.strip()!r} is not role=column.")
                continue
            role, column = (x.strip() for x in part.split("=", 1))
            allowed = self.ITEM_ROLES if kind == "items" else self.RATIONALE_ROLES
            if role not in allowed:
                self.add_error("columns", f"unknown role {role!r}; use {', '.join(sorted(allowed))}.")
            mapping[role] = column
        data["column_map"] = mapping
        return data

    def service_options(self) -> dict:
        d = self.cleaned_data
        kind = d["kind"]
        opts: dict = {"filename": d["file"].name}
        if kind in ("strategyqa", "openbookqa"):
            if d.get("dataset"):
                opts["dataset_name"] = d["dataset"]
            opts["split"] = d.get("split") or None
        elif kind == "items":
            opts.update(
                dataset_name=d["dataset"], split=d.get("split") or None, task_format=d.get("task_format") or None,
                choice_labels=[x for x in (d.get("choice_labels") or "").split(",") if x.strip()] or None,
                columns=ItemColumns(**d["column_map"]),
            )
        elif kind == "rationales":
            opts.update(
                dataset_name=d["dataset"], split=d.get("split") or None, source_name=d.get("source") or None,
                columns=RationaleColumns(**d["column_map"]),
            )
        elif kind == "generalization":
            # An import option (a dict), not a write of the status: the importer applies it.
            opts.update({"dataset_name": d["dataset"], "split": d.get("split") or None,
                         "validation_status": d.get("validation_status") or None})
        return opts


@admin.register(ImportJob)
class ImportJobAdmin(LookupGuardAdmin):
    """Background imports and their progress (read-only: a job is made by the import page)."""

    list_display = ["created_at", "kind", "filename", "status", "stage", "rows_read", "record", "created_by"]
    list_filter = ["status", "kind"]
    search_fields = ["filename"]
    readonly_fields = [f.name for f in ImportJob._meta.fields if f.name != "file"]
    exclude = ["file"]

    def get_queryset(self, request):
        return import_jobs_for_user(user=request.user)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff and (
            request.user.has_perm("studies.view_importrecord") or request.user.has_perm("studies.add_importrecord"))


@admin.register(ImportRecord)
class ImportRecordAdmin(LookupGuardAdmin):
    list_display = ["imported_at", "kind", "filename", "dataset", "created", "updated", "unchanged", "imported_by"]
    list_filter = ["kind", ("dataset", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["filename", "sha256"]
    readonly_fields = [f.name for f in ImportRecord._meta.fields]
    change_list_template = "admin/studies/importrecord/change_list.html"

    def get_queryset(self, request):
        # What the API lists (``import_records_for_user``): the user's own imports and those whose study or
        # dataset they may read, whatever model permission opened the page (view or change).
        qs = import_records_for_user(user=request.user)
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs

    def has_view_permission(self, request, obj=None):
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self.get_queryset(request).filter(pk=obj.pk).exists())

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        # An audit trail, never deleted here, whoever asks (no "Delete selected", and the delete page
        # refuses every record): a bundle copy's record is what makes it a copy (``study_imported``,
        # ``bundle_copy_ids``, the bundle's scores and the withdrawals that reach it), so deleting it
        # would turn the copy into a study run here.
        return False

    def get_urls(self):
        urls = [
            path("import/", self.admin_site.admin_view(self.import_view), name="studies_import_data"),
        ]
        return urls + super().get_urls()

    def import_view(self, request):
        """Upload a file and run its importer; a refused file lists every bad row."""
        if not (request.user.is_staff and request.user.has_perm("studies.add_item")):
            raise PermissionDenied
        errors = None
        failed_file = ""
        unlisted = 0
        if request.method == "POST":
            form = ImportForm(request.POST, request.FILES)
            if form.is_valid():
                kind = form.cleaned_data["kind"]
                upload = form.cleaned_data["file"]
                try:
                    if import_in_background(file=upload):
                        job = import_job_create(kind=kind, file=upload, user=request.user,
                                                options=form.service_options())
                        self.message_user(request, f"{job.filename} is large: it is imported in the background "
                                                   f"(import job {job.pk}); this page shows its progress.",
                                          messages.INFO)
                        return HttpResponseRedirect(reverse("admin:studies_importjob_change", args=[job.pk]))
                    record = import_run(kind=kind, file=upload, user=request.user, **form.service_options())
                except ImportValidationError as exc:
                    errors = exc.errors
                    failed_file = exc.filename or form.cleaned_data["file"].name
                    unlisted = exc.unlisted
                else:
                    self.message_user(request, import_message(record), messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:studies_importrecord_change", args=[record.pk]))
        else:
            form = ImportForm(initial={"kind": request.GET.get("kind", "strategyqa")})
        context = {
            **self.admin_site.each_context(request),
            "title": "Import data",
            "opts": self.model._meta,
            "form": form,
            "errors": errors,
            "unlisted": unlisted,
            "failed_file": failed_file,
            "kinds": [(k, label) for k, (label, _) in IMPORT_KINDS.items()],
            "dataset_names": list(  # the suggestions: the datasets an import for this user may write to
                datasets_to_import_into(user=request.user).order_by("name").values_list("name", flat=True)),
        }
        return TemplateResponse(request, "admin/studies/import_data.html", context,
                                status=400 if errors else 200)

