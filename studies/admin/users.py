"""Admin of user accounts: Django's own, but an account that something keeps is refused with the
rows that keep it.

``Study.owner`` and these records of who acted (``PlatformCall.user``, ``Bonus.created_by``,
``Publication``'s and the links' ``created_by``, ``FlagReview.decided_by``,
``PlatformSubmission.cleared_by``, ``WorkerBlock.researcher``,
``Withdrawal.withdrawn_by``, a question generator's and an LM job's ``created_by``,
``ImportRecord.imported_by``) are ``PROTECT``: an account that owns a study or made any of these
cannot be deleted (the README: "Accounts are deactivated, never deleted"). The page names the rows
from Django's collector, not from a list here, so a new ``PROTECT`` key is listed as it is added.
Django's delete page and "Delete selected" count a protected row whose admin deletes nothing (the
platform-call and bonus admins) as a type the user may not delete, and name only that type instead
of the protected rows; here such a type is counted only when a row that
would be deleted needs it, so the page lists the protected rows and says to deactivate instead. It
names at most ``PROTECTED_SHOWN`` rows of each type and counts the rest: a researcher who handed out
5,000 participant links made the page run a query per link (5,040 queries, 4.9 s)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import NestedObjects, quote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import router
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.text import capfirst

User = get_user_model()

DEACTIVATE = ("An account that owns a study or made a platform call, bonus, publication, link, flag decision, "
              "clear of held work, block, withdrawal, question generator, LM job or import is kept, with who "
              "made them: deactivate it instead (untick Active on the account's page).")


# The protected rows of each type the delete page names; the others are counted.
PROTECTED_SHOWN = 10


class AccountAdmin(UserAdmin):
    def get_deleted_objects(self, objs, request):
        if not objs:
            return super().get_deleted_objects(objs, request)
        collector = NestedObjects(using=router.db_for_write(self.model), origin=objs)
        collector.collect(objs)
        if not collector.protected:
            return super().get_deleted_objects(objs, request)
        # Django counts the protected rows' types too: keep a type only where a deleted row needs it.
        needed = {obj._meta.verbose_name for model, rows in collector.model_objs.items()
                  if self.admin_site.is_registered(model) for obj in rows
                  if not self.admin_site.get_model_admin(model).has_delete_permission(request, obj)}
        model_count = {model._meta.verbose_name_plural: len(rows) for model, rows in collector.model_objs.items()}
        self.message_user(request, DEACTIVATE, messages.WARNING)
        return [], model_count, needed, self._protected_list(collector.protected)

    def _protected_list(self, protected) -> list:
        """The protected rows as Django's delete page names them ("Type: row", linked to the row's
        admin page where it has one), type by type, each type's first ``PROTECTED_SHOWN`` by id and
        then how many more."""
        by_model: dict = {}
        for obj in protected:
            by_model.setdefault(obj.__class__, []).append(obj)
        listed = []
        for model, rows in sorted(by_model.items(), key=lambda kv: str(kv[0]._meta.verbose_name)):
            rows.sort(key=lambda obj: obj.pk)
            listed += [self._named(obj) for obj in rows[:PROTECTED_SHOWN]]
            if len(rows) > PROTECTED_SHOWN:
                more = len(rows) - PROTECTED_SHOWN
                listed.append(f"... and {more} more "
                              f"{model._meta.verbose_name if more == 1 else model._meta.verbose_name_plural}")
        return listed

    def _named(self, obj) -> str:
        label = f"{capfirst(obj._meta.verbose_name)}: {obj}"
        if not self.admin_site.is_registered(obj.__class__):
            return label
        try:
            url = reverse(f"{self.admin_site.name}:{obj._meta.app_label}_{obj._meta.model_name}_change",
                          args=(quote(obj.pk),))
        except NoReverseMatch:
            return label
        return format_html('{}: <a href="{}">{}</a>', capfirst(obj._meta.verbose_name), url, obj)


admin.site.unregister(User)
admin.site.register(User, AccountAdmin)
