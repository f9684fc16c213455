"""Status fields and the changes allowed between their values, declared once per model.

A model declares its machine next to its ``Status`` choices::

    STATUS = StatusMachine("status", {
        Status.DRAFT: {Status.OPEN},
        Status.OPEN: {Status.CLOSED},
    })

and every write of the field goes through it: ``Model.STATUS.move(obj, new)`` for one row
(checks the row's current value under the caller's lock and saves), or
``Model.STATUS.move_queryset(queryset, new)`` for many (one conditional ``UPDATE ... WHERE status IN
(allowed sources)``, so a row that moved meanwhile is left alone, never forced). Staying in the same
state is not a transition: ``move`` of a row already in ``new`` changes nothing and returns False.
``tests/test_transitions.py`` tries every forbidden change of every machine and checks that no
module writes a status field any other way.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone


class TransitionError(Exception):
    """A status change that the model's machine does not allow. The message names both states."""


@dataclass(frozen=True)
class StatusMachine:
    field: str
    allowed: Mapping[str, Iterable[str]]
    _allowed: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_allowed", {str(k): frozenset(str(v) for v in vs) for k, vs in self.allowed.items()})

    @property
    def states(self) -> set[str]:
        out = set(self._allowed)
        for targets in self._allowed.values():
            out |= targets
        return out

    def can(self, old: str, new: str) -> bool:
        return str(new) in self._allowed.get(str(old), frozenset())

    def sources(self, new: str) -> list[str]:
        """The states from which ``new`` may be reached."""
        return sorted(old for old, targets in self._allowed.items() if str(new) in targets)

    def check(self, old: str, new: str, *, what: str = "") -> None:
        if not self.can(old, new):
            label = f"{what} " if what else ""
            raise TransitionError(f"{label}cannot go from '{old}' to '{new}'".strip())

    def move(self, obj: Any, new: str, *, save: bool = True, **fields: Any) -> bool:
        """Move one row to ``new`` (and set ``fields`` with it). Returns False, changing nothing,
        when the row is already in ``new``; raises ``TransitionError`` when the change is not
        allowed. Call with the row locked (``select_for_update``) when others may move it too."""
        old = getattr(obj, self.field)
        if str(old) == str(new):
            return False
        self.check(old, new, what=f"{type(obj).__name__} {getattr(obj, 'pk', '')}")
        setattr(obj, self.field, new)
        for name, value in fields.items():
            setattr(obj, name, value)
        if save:
            update_fields = [self.field, *fields]
            if any(f.name == "updated_at" for f in obj._meta.concrete_fields):
                update_fields.append("updated_at")
            obj.save(update_fields=update_fields)
        return True

    def move_queryset(self, queryset, new: str, **fields: Any) -> int:
        """Move every row of ``queryset`` that may reach ``new`` from where it is now; rows in any
        other state (including ``new`` itself) are left as they are. Returns how many moved."""
        sources = self.sources(new)
        if not sources:
            return 0
        if any(f.name == "updated_at" for f in queryset.model._meta.concrete_fields) and "updated_at" not in fields:
            fields["updated_at"] = timezone.now()
        return queryset.filter(**{f"{self.field}__in": sources}).update(**{self.field: new}, **fields)
