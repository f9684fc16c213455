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
would be deleted needs it, so the page lists every protected row and says to deactivate instead."""
from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import NestedObjects
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import router

User = get_user_model()

DEACTIVATE = ("An account that owns a study or made a platform call, bonus, publication, link, flag decision, "
              "clear of held work, block, withdrawal, question generator, LM job or import is kept, with who "
              "made them: deactivate it instead (untick Active on the account's page).")


class AccountAdmin(UserAdmin):
    def get_deleted_objects(self, objs, request):
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        if not objs:
            return deleted, model_count, perms_needed, protected
        collector = NestedObjects(using=router.db_for_write(self.model), origin=objs)
        collector.collect(objs)
        if not collector.protected:
            return deleted, model_count, perms_needed, protected
        # Django counts the protected rows' types too: keep a type only where a deleted row needs it.
        needed = {obj._meta.verbose_name for model, rows in collector.model_objs.items()
                  if self.admin_site.is_registered(model) for obj in rows
                  if not self.admin_site.get_model_admin(model).has_delete_permission(request, obj)}
        held = {obj._meta.verbose_name for obj in collector.protected} - needed
        self.message_user(request, DEACTIVATE, messages.WARNING)
        return deleted, model_count, set(perms_needed) - held, protected


admin.site.unregister(User)
admin.site.register(User, AccountAdmin)
