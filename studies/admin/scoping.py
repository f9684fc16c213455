"""Per-study access in the admin: every admin of something that belongs to a study mixes in
``StudyScopedAdmin``, and every admin that shows crowdworkers mixes in ``RawWorkerIdsAdmin``.

Both read the one definition in ``studies.selectors`` (``studies_for_user``,
``user_may_see_raw_worker_ids``): lists hold only rows of studies the user may see, a change page
of another researcher's study answers 404 (as if it did not exist), changing and deleting need
CHANGE access to the row's study, study choices in forms and list filters offer only those
studies, and raw platform worker ids appear only for holders of ``studies.view_raw_worker_ids``.
Django's own model permissions still apply on top."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist

from studies.models import Study
from studies.selectors import CHANGE, VIEW, studies_for_user, user_may_see_raw_worker_ids


class StudyScopedAdmin(admin.ModelAdmin):
    """``study_path``: the lookup from this model to its study (``"study"``, ``"claim__study"``;
    ``"pk"`` for the Study admin itself)."""

    study_path = "study"

    def _studies(self, request, access: str = VIEW):
        return studies_for_user(user=request.user, access=access)

    def _in_studies(self, request, access: str = VIEW) -> dict:
        """The filter "belongs to a study the user may reach", as a subquery on ids so that a
        path through a to-many relation (a participant's assignments) repeats no row."""
        rows = self.model._default_manager.filter(**{f"{self.study_path}__in": self._studies(request, access)})
        return {"pk__in": rows.values("pk")}

    def get_queryset(self, request):
        return super().get_queryset(request).filter(**self._in_studies(request))

    def _row_in(self, request, obj, access: str) -> bool:
        return self.model._default_manager.filter(
            **{f"{self.study_path}__in": self._studies(request, access)}, pk=obj.pk
        ).exists()

    def has_view_permission(self, request, obj=None):
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, VIEW))

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, CHANGE))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, CHANGE))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model is Study:
            kwargs["queryset"] = self._studies(request, CHANGE)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request):
        """Relation filters list only the values present in the rows the user may see (a plain
        filter on ``study`` would list every study's name)."""
        out = []
        for entry in super().get_list_filter(request):
            if isinstance(entry, str) and _is_relation(self.model, entry):
                entry = (entry, admin.RelatedOnlyFieldListFilter)
            out.append(entry)
        return out


def _is_relation(model, path: str) -> bool:
    try:
        return get_fields_from_path(model, path)[-1].is_relation
    except (FieldDoesNotExist, NotRelationField):
        return False


class RawWorkerIdsAdmin(admin.ModelAdmin):
    """``raw_worker_id_fields``: fields holding raw platform worker ids; shown, searched and
    listed only for users who may see raw worker ids."""

    raw_worker_id_fields: tuple[str, ...] = ()

    def _hide(self, request, names):
        if user_may_see_raw_worker_ids(request.user):
            return list(names)
        raw = set(self.raw_worker_id_fields)
        return [n for n in names if not isinstance(n, str) or (n not in raw and n.split("__")[-1] not in raw)]

    def get_list_display(self, request):
        return self._hide(request, super().get_list_display(request))

    def get_search_fields(self, request):
        return self._hide(request, super().get_search_fields(request))

    def get_fields(self, request, obj=None):
        return self._hide(request, super().get_fields(request, obj))

    def get_readonly_fields(self, request, obj=None):
        return self._hide(request, super().get_readonly_fields(request, obj))
