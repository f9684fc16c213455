"""Receivers on the user model (connected in ``StudiesConfig.ready``): a password change ends the
user's API tokens, as it ends their sessions (``api_tokens_end_for_password_change``).

And the signals the apps above studies receive when generalization questions' validation status
changes (``generalization_validation_changed``) and when a study changes owner
(``study_owner_changed``): studies may not import them (the layers), and the questions' units of
work and the workers' blocks and tasks are theirs.

A change is what Django itself calls one: ``set_password`` keeps the raw password on the instance
(``_password``) until ``AbstractBaseUser.save`` has passed it to ``password_changed``, so a save
that carries it writes a new password (the admin's password pages, the password reset and change
views, ``changepassword``). Django's rehash of the same password on login (``check_password``
after a hasher's iteration count or ``PASSWORD_HASHERS`` changed) clears ``_password`` and is no
change: tokens keep working, where a comparison of password fields would have ended them all.
``set_unusable_password`` keeps no raw password, so it is read from the row: a save that writes
an unusable password different from the stored one is a change too (only then, one query)."""
from __future__ import annotations

from django.contrib.auth.hashers import is_password_usable
from django.dispatch import Signal

from studies.api.tokens import api_tokens_end_for_password_change

# Sent by ``studies.services.content.generalization_questions_validation_move`` (the one write of a
# question's status: a researcher's change, an import's, or an edit's reset) inside the
# transaction that changed the status of the questions ``question_ids`` (ids, as a list), after the
# change is written and with those questions still locked (``sender``: ``GeneralizationQuestion``).
# A receiver's write is part of that transaction: an error in it undoes the change. Received by
# ``annotations.services.stopping.units_follow_question_validation`` (connected in
# ``AnnotationsConfig.ready``): the units of a question marked invalid in an open study stop taking
# workers, and take them again when it is marked valid or unvalidated.
generalization_validation_changed = Signal()

# Sent by ``studies.services.studies.study_update`` inside the transaction that handed ``study`` (the
# locked row, its new owner saved) to another owner, with the study row still locked (``sender``:
# ``Study``; ``old_owner_id``: the owner before, or None). A receiver's write is part of that
# transaction: an error in it undoes the handover. Received by
# ``annotations.services.platforms.blocks.blocks_end_tasks_in_study`` (``study_handed_over``, connected in
# ``AnnotationsConfig.ready``): a researcher's block covers the studies they own, so the new owner's
# blocks now cover this one, and the tasks in progress of the workers they blocked end as the block
# ended their tasks in the studies it covered when it was made.
study_owner_changed = Signal()

# Set by the pre_save receiver on an instance whose save makes its password unusable; read and
# removed by the post_save receiver of the same save.
MADE_UNUSABLE = "_studies_password_made_unusable"


def _writes_password(update_fields) -> bool:
    return update_fields is None or "password" in update_fields


def note_password_made_unusable(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """pre_save: whether this save replaces the stored password with an unusable one."""
    if (raw or instance.pk is None or getattr(instance, "_password", None) is not None
            or is_password_usable(instance.password) or not _writes_password(update_fields)):
        return
    if sender._default_manager.filter(pk=instance.pk).exclude(password=instance.password).exists():
        setattr(instance, MADE_UNUSABLE, True)


def end_api_tokens_on_password_change(sender, instance, created=False, raw=False, update_fields=None,
                                      **kwargs) -> None:
    """post_save: end the user's tokens when this save wrote a new password. Runs inside the save,
    before ``AbstractBaseUser.save`` clears ``_password``."""
    made_unusable = instance.__dict__.pop(MADE_UNUSABLE, False)
    if raw or created or not _writes_password(update_fields):
        return
    if getattr(instance, "_password", None) is not None or made_unusable:
        api_tokens_end_for_password_change(user=instance)
