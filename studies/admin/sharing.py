"""The study page's "Shared with" inline: one row per researcher, with the level of the share
(view, change, pay). Rows are written through ``study_share`` / ``study_unshare``, so only the
study's owner (or a superuser) can share it or change a level; everyone else sees the rows
read-only."""
from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.forms.models import BaseInlineFormSet

from studies.models import StudyShare
from studies.services.sharing import share_recipient_get, study_share, study_unshare
from studies.services.studies import StudyError


class ShareForm(forms.ModelForm):
    """The researcher is typed by username (no list of every account to pick from); one that is
    not an active user gets the same answer whoever it is (``share_recipient_get``)."""

    user = forms.CharField(widget=forms.TextInput, label="username", strip=False)

    class Meta:
        model = StudyShare
        fields = ["user", "level"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["user"] = self.instance.user.username

    def clean_user(self):
        user = share_recipient_get(self.cleaned_data["user"])
        if user is None:
            raise forms.ValidationError("Not found or not yours: give an active researcher's username.",
                                        code="invalid_choice")
        return user


class _ShareFormSet(BaseInlineFormSet):
    acting_user = None  # set by StudyShareInline.get_formset

    def save_new(self, form, commit=True):
        return self._share(form.cleaned_data)

    def save_existing(self, form, obj, commit=True):
        if obj.user_id != form.cleaned_data["user"].pk:  # the row now names someone else
            self.delete_existing(obj)
        return self._share(form.cleaned_data)

    def delete_existing(self, obj, commit=True):
        try:
            study_unshare(study=self.instance, user=self.acting_user, with_user=obj.user)
        except StudyError as exc:
            raise PermissionDenied(str(exc)) from exc

    def _share(self, data):
        try:
            return study_share(study=self.instance, user=self.acting_user, with_user=data["user"], level=data["level"])
        except StudyError as exc:
            raise PermissionDenied(str(exc)) from exc


class StudyShareInline(admin.TabularInline):
    model = StudyShare
    form = ShareForm
    formset = _ShareFormSet
    fields = ["user", "level"]
    extra = 0
    verbose_name = "share"
    verbose_name_plural = ("Shared with (view: read it; change: also its design and content; pay: also "
                           "publish it and move money). Only the owner shares a study.")

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.acting_user = request.user
        return formset

    def _may_share(self, request, obj) -> bool:
        """What the page offers; ``study_share`` checks it again. A study's page is saved with
        ``studies.change_study``; its shares, only by the owner (anyone on a new study's page)."""
        user = request.user
        if not user.has_perm("studies.change_study"):
            return False
        return obj is None or user.is_superuser or (obj.owner_id is not None and obj.owner_id == user.pk)

    def has_add_permission(self, request, obj=None):
        return self._may_share(request, obj)

    def has_change_permission(self, request, obj=None):
        return self._may_share(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._may_share(request, obj)

    def has_view_permission(self, request, obj=None):
        return True  # whoever sees the study sees whom it is shared with
