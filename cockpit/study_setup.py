"""What the study page sets up besides the design: the sources picker (only sources with
rationales for the chosen dataset and split), and the attention checks and qualification test as
inlines of the study, so that a researcher never leaves the study page to prepare a study."""
from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth.models import AnonymousUser

from annotations.models import AttentionCheck, QualificationTest
from annotations.services.qualification import (
    AttentionCheckRefused,
    QualificationSetupError,
    QualificationTestRefused,
    attention_check_delete,
    attention_check_delete_check,
    attention_check_save,
    attention_checks_fixed,
    qualification_questions,
    qualification_test_delete,
    qualification_test_delete_check,
    qualification_test_fixed_reason,
    qualification_test_problem,
    qualification_test_save,
    qualification_test_sent_to_mturk,
    qualification_test_taken,
)
from studies.choices import correct_answer_problem, normalise_choices


class SourcesPicker(forms.CheckboxSelectMultiple):
    """Checkboxes that carry the (dataset, split) pairs each source has rationales for
    (``data-coverage="<dataset id>:<split> ..."``); the study page's script shows those that match
    the chosen dataset and split."""

    def __init__(self, *args, coverage: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.coverage = coverage or {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        pk = getattr(value, "value", value)
        pairs = sorted(self.coverage.get(pk, ()))
        option["attrs"]["data-coverage"] = " ".join(f"{dataset}:{split}" for dataset, split in pairs)
        return option


def _choices_field_help() -> str:
    return 'A JSON list of answer labels, e.g. ["yes", "no"]; empty means yes / no.'


def check_choices(choices) -> None:
    """A ValidationError naming what is wrong with ``choices``; whether the correct answer is one of
    them is the model's check (``annotations.choices.correct_answer_problem``)."""
    if not isinstance(choices, list):
        raise forms.ValidationError({"choices": "A list of answer labels, e.g. [\"yes\", \"no\"]."})
    if any(not c["label"] for c in normalise_choices(choices)):
        raise forms.ValidationError({"choices": "Every choice needs a label."})


class ChoicesField(forms.JSONField):
    """The attention check's choices: empty (shown empty, never as ``[]``) means yes / no."""

    def __init__(self, **kwargs):
        super().__init__(**{**kwargs, "required": False})

    def to_python(self, value):
        return [] if value in self.empty_values else super().to_python(value)

    def prepare_value(self, value):
        return "" if value in ([], None, "") else super().prepare_value(value)


class AttentionCheckForm(forms.ModelForm):
    # Who saves it (AttentionCheckInline.get_formset names the request's user); unnamed, nobody:
    # the service refuses, never acting as the operator.
    acting_user = AnonymousUser()

    class Meta:
        model = AttentionCheck
        fields = ["question", "choices", "correct_answer"]
        field_classes = {"choices": ChoicesField}
        widgets = {"question": forms.Textarea(attrs={"rows": 2, "cols": 50})}
        help_texts = {"choices": _choices_field_help()}

    def clean(self):
        data = super().clean()
        if "choices" in data:
            check_choices(data["choices"] or [])
        return data

    def save(self, commit=True):
        check = super().save(commit=False)
        if commit:
            attention_check_save(check=check, user=self.acting_user)
        return check


class ServiceDeleteFormSet(forms.BaseInlineFormSet):
    """An inline whose rows are deleted through a service that checks the acting user and its rule
    itself (``delete``), asked first when the page is checked (``delete_check``, inside the page's
    transaction, under the locks it takes until the delete): a row that became fixed since the page
    was read is refused on the page, with the service's reason (``refusals``), nothing saved, rather
    than failing the save."""

    refusals: tuple[type[Exception], ...] = ()

    def delete_check(self, obj) -> None:
        raise NotImplementedError

    def delete(self, obj) -> None:
        raise NotImplementedError

    def clean(self):
        super().clean()
        for form in self.forms:
            if form.instance.pk is None or not (self.can_delete and self._should_delete_form(form)):
                continue
            try:
                self.delete_check(form.instance)
            except self.refusals as exc:
                raise forms.ValidationError(str(exc)) from exc

    def delete_existing(self, obj, commit=True):
        if commit:
            self.delete(obj)


class AttentionCheckFormSet(ServiceDeleteFormSet):
    """Deletes through ``attention_check_delete``, as its forms save through ``attention_check_save``,
    asking ``attention_check_delete_check`` first (a check given to a worker since the page was read)."""

    refusals = (AttentionCheckRefused,)

    def delete_check(self, obj) -> None:
        attention_check_delete_check(check=obj, user=self.form.acting_user)

    def delete(self, obj) -> None:
        attention_check_delete(check=obj, user=self.form.acting_user)


class AttentionCheckInline(admin.TabularInline):
    model = AttentionCheck
    form = AttentionCheckForm
    formset = AttentionCheckFormSet

    def get_formset(self, request, obj=None, **kwargs):
        # As the qualification test's inline: each request's formset gets its own form class naming
        # the user the services check (never a shared class attribute).
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = type(formset.form.__name__, (formset.form,), {"acting_user": request.user})
        return formset

    extra = 0
    verbose_name = "attention check"
    verbose_name_plural = "Attention checks (mixed into tasks; workers who miss them are flagged)"

    # Fixed once a worker was given one (``attention_checks_fixed``): the review grades the answers
    # against them. New ones may still be added. ``obj`` is the study.
    def has_change_permission(self, request, obj=None):
        return not attention_checks_fixed(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not attention_checks_fixed(obj) and super().has_delete_permission(request, obj)


QUESTIONS_HELP = (
    "One question per line: question | correct answer | choices separated by ; (leave the choices out "
    "for yes / no). For example: <code>Is Paris in France? | yes</code> or "
    "<code>Which is a mammal? | whale | whale; shark; trout</code>."
)


def parse_questions(text: str) -> list[dict]:
    """The qualification questions written one per line (see ``QUESTIONS_HELP``); a bad line is a
    ValidationError naming the line and what is wrong."""
    questions, errors = [], []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            errors.append(f"Line {number}: write 'question | correct answer' or 'question | correct answer | "
                          "choice; choice; ...'.")
            continue
        choices = [c.strip() for c in parts[2].split(";")] if len(parts) == 3 and parts[2] else []
        if any(not c for c in choices):
            errors.append(f"Line {number}: an empty choice (two ; in a row, or one at the end).")
            continue
        problem = correct_answer_problem(choices, parts[1])
        if problem:
            errors.append(f"Line {number}: the correct answer {problem}")
            continue
        questions.append({"question": parts[0], "choices": choices, "correct_answer": parts[1]})
    if errors:
        raise forms.ValidationError(errors)
    return questions


def format_questions(test: QualificationTest) -> str:
    lines = []
    for q in test.questions.all():
        choices = [c["label"] for c in normalise_choices(q.choices)] if q.choices else []
        lines.append(" | ".join([q.question, q.correct_answer] + (["; ".join(choices)] if choices else [])))
    return "\n".join(lines)


class QualificationTestForm(forms.ModelForm):
    # Who saves it (QualificationTestInline.get_formset names the request's user); unnamed, nobody:
    # the service refuses, never acting as the operator.
    acting_user = AnonymousUser()
    questions = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 80}), required=True,
                                help_text=QUESTIONS_HELP)

    class Meta:
        model = QualificationTest
        fields = ["pass_mark", "instructions", "questions"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial.setdefault("questions", format_questions(self.instance))

    def clean(self):
        data = super().clean()
        if "questions" in data:
            data["parsed_questions"] = parse_questions(data["questions"])
            # The service's rule (qualification_test_save refuses such a test), asked here for its message
            # beside the field; a fixed test's pass mark is read-only (not in ``data``): not judged again.
            problem = qualification_test_problem(pass_mark=data.get("pass_mark"),
                                                 question_count=len(data["parsed_questions"]))
            if problem is not None:
                self.add_error(*problem)
            elif self.instance.pk and data["parsed_questions"] != qualification_questions(self.instance):
                fixed = qualification_test_fixed_reason(self.instance)
                if fixed:
                    self.add_error("questions", f"{fixed}: its questions can no longer change.")
        return data

    def save(self, commit=True):
        test = super().save(commit=False)
        if commit:  # a new test also holds the study's tasks in progress until their workers pass it
            qualification_test_save(test=test, user=self.acting_user, questions=self.cleaned_data["parsed_questions"])
        return test


class QualificationTestFormSet(ServiceDeleteFormSet):
    """Deletes through ``qualification_test_delete``, as its form saves through ``qualification_test_save``,
    asking ``qualification_test_delete_check`` first: it locks the study and the test until the
    delete, so a worker who took the test since the page was read is seen."""

    refusals = (QualificationSetupError, QualificationTestRefused)

    def delete_check(self, obj) -> None:
        qualification_test_delete_check(test=obj, user=self.form.acting_user)

    def delete(self, obj) -> None:
        qualification_test_delete(test=obj, user=self.form.acting_user)


class QualificationTestInline(admin.StackedInline):
    model = QualificationTest
    form = QualificationTestForm
    formset = QualificationTestFormSet

    def get_formset(self, request, obj=None, **kwargs):
        # The form saves through qualification_test_save, which checks the acting user itself: each
        # request's formset gets its own form class that names the user (never a shared class attribute).
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = type(formset.form.__name__, (formset.form,), {"acting_user": request.user})
        return formset
    extra = 0
    max_num = 1
    verbose_name = "qualification test"
    verbose_name_plural = "Qualification test (graded once per worker before their first task)"

    # Once a worker has taken it, its grading is fixed and it is not deleted: the form refuses other
    # questions, and the pass mark is read-only here (``qualification_test_taken``); once it was sent to
    # MTurk, its instructions too (MTurk's graded copy holds them). ``obj`` is the study.
    def _test(self, obj) -> QualificationTest | None:
        return QualificationTest.objects.filter(study=obj).first() if obj is not None and obj.pk else None

    def _taken(self, obj) -> bool:
        test = self._test(obj)
        return test is not None and qualification_test_taken(test)

    def get_readonly_fields(self, request, obj=None):
        test = self._test(obj)
        if test is None or not qualification_test_taken(test):
            return ()
        return ("pass_mark", "instructions") if qualification_test_sent_to_mturk(test) else ("pass_mark",)

    def has_delete_permission(self, request, obj=None):
        return not self._taken(obj) and super().has_delete_permission(request, obj)
