"""Admin for API tokens: a researcher creates one here and copies its key from the message shown
once after saving (only a digest is stored). Non-superusers see and create only their own tokens.
A saved token can be renamed or narrowed (revoked, made read-only, its expiry brought forward)
through ``api_token_update``, never widened (``ApiToken.clean``); the page shows what can no
longer change as read-only. Each token's status says whether it still works, and if not why
(``api_token_refusal``: revoked, expired, user inactive, ended by a password change)."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from studies.api.tokens import UPDATABLE, api_token_create, api_token_refusal, api_token_update
from studies.models import ApiToken


class ApiTokenAddForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["user", "name", "read_only", "expires_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "status", "read_only", "revoked", "created_at", "last_used_at",
                    "expires_at"]
    list_filter = ["read_only", "revoked"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["prefix", "status", "created_at", "last_used_at"]

    @admin.display(description="status")
    def status(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return api_token_refusal(token=obj) or "active"

    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("user")
        return qs if request.user.is_superuser else qs.filter(user=request.user)

    def get_changeform_initial_data(self, request):
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}  # default: yourself

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            fields = ["user", "name", "read_only", "expires_at"]
            return fields if request.user.is_superuser else fields[1:]
        return ["user", "name", "prefix", "status", "read_only", "revoked", "expires_at", "created_at", "last_used_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        fixed = ["user", "prefix", "status", "created_at", "last_used_at"]
        if obj.revoked:  # nothing but its name changes any more
            return [*fixed, "read_only", "revoked", "expires_at"]
        return [*fixed, "read_only"] if obj.read_only else fixed

    def save_model(self, request, obj, form, change):
        if change:
            changes = {f: form.cleaned_data[f] for f in form.changed_data if f in UPDATABLE}
            if changes:
                api_token_update(token=obj, user=request.user, **changes)
            return
        user = obj.user if request.user.is_superuser and obj.user_id else request.user
        token, key = api_token_create(
            user=user, name=obj.name, by=request.user, read_only=obj.read_only, expires_at=obj.expires_at
        )
        obj.pk = token.pk
        obj.user = token.user
        obj.prefix = token.prefix
        obj.key_digest = token.key_digest
        obj.created_at = token.created_at
        messages.warning(
            request,
            format_html(
                "Token created. Copy the key now, it will not be shown again: <code>{}</code> "
                "(send it as the header <code>Authorization: Token {}</code>).",
                key,
                key,
            ),
        )
