"""The buttons of the review pages (the publish page here, the cockpit's worker page): one
dispatcher from a POST's ``action`` to its handler, and one form for a bonus.

A handler takes the request and what the page is about (the study; on the worker page also the
worker), calls one platform service with ``user=request.user`` (the service checks the right:
``annotations.services.platforms``) and returns what to tell the researcher. A refusal
(``PlatformServiceError``, ``PlatformError``) or bad input (``ValueError``) becomes an error
message that starts "Nothing was done"; the page never answers 500 for a button."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.http import HttpRequest

from annotations.models import Bonus
from annotations.platforms.base import PlatformError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.bonus import bonus_amount
from lab.ids import parse_id

# (request, *what the page is about) -> the success message, or None when nothing needs saying.
Handler = Callable[..., str | None]


def post_action(request: HttpRequest, actions: Mapping[str, Handler], *args) -> None:
    """Run the handler of the POST's ``action`` and show its message or why nothing was done."""
    action = request.POST.get("action", "")
    handler = actions.get(action)
    if handler is None:
        messages.error(request, f"Unknown action {action!r}.")
        return
    try:
        done = handler(request, *args)
    except (PlatformServiceError, PlatformError) as exc:
        messages.error(request, f"Nothing was done: {exc.message}")
    except ValueError as exc:
        messages.error(request, f"Nothing was done: invalid input: {exc}")
    else:
        if done:
            messages.success(request, done)


def task_ids(text: str) -> list[int]:
    """Task (assignment) numbers from a field: whole numbers separated by commas or spaces.
    ``PlatformServiceError`` names the first that is not one (``abc``, ``1.5``, ``-1``, ``١``)."""
    ids = []
    for raw in text.replace(",", " ").split() or [text]:
        pk = parse_id(raw)
        if pk is None:
            raise PlatformServiceError(f"task {raw[:40]!r} is not a task number")
        ids.append(pk)
    return ids


@dataclass(frozen=True)
class BonusAsked:
    amount: str  # checked by ``bonus_amount``; the services read it again (as a background task does)
    reason: str
    kind: str
    tasks: str  # the task number(s) as typed; read them with ``task_ids``


class BonusForm(forms.Form):
    """A bonus button's fields, on the publish page (the same bonus for many tasks, or for a kind's
    candidates) and on the worker page (for one task)."""

    amount = forms.CharField(required=False, strip=False)
    reason = forms.CharField(required=False)
    kind = forms.CharField(required=False)
    assignment_ids = forms.CharField(required=False)  # the publish page: several task numbers
    assignment = forms.CharField(required=False, strip=False)  # the worker page: one

    def asked(self) -> BonusAsked:
        """The bonus asked for, its amount checked (``bonus_amount``) before anything is paid or
        queued; ``PlatformServiceError`` otherwise."""
        self.full_clean()
        data = self.cleaned_data
        amount = data.get("amount", "")
        bonus_amount(amount)
        return BonusAsked(amount=amount.strip(), reason=data.get("reason", ""), kind=data.get("kind") or Bonus.Kind.OTHER,
                          tasks=data.get("assignment_ids") or data.get("assignment", ""))
