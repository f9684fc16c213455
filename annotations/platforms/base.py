"""One interface for every crowd platform: publish, sync, approve, reject, bonus, block, close,
plus cost estimates and the account balance.

Implementations talk to the platform and nothing else: they never touch the database. The
services in the package ``annotations.services.platforms`` decide what to call, write the audit rows and
keep everything idempotent.
"""
from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

CENT = Decimal("0.01")


def money(value: Decimal | int | float | str) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def to_minor_units(amount: Decimal) -> int:
    """Pounds / dollars to pence / cents, refusing fractions of a cent."""
    amount = Decimal(str(amount))
    if amount != amount.quantize(CENT):
        raise PlatformError(f"amount {amount} has more than two decimals; the platforms pay whole cents")
    return int((amount * 100).to_integral_value())


class PlatformError(Exception):
    """The platform refused the request (bad input, not allowed, not found). Not retried."""

    def __init__(self, message: str, *, response: dict | None = None):
        super().__init__(message)
        self.message = message
        self.response = response or {}


class PlatformNotFound(PlatformError):
    """The platform says what was asked about does not exist there (HTTP 404): an answer, not a
    failure to get one (``annotations.services.impostor`` reads it as "not this worker's")."""


class PlatformTransientError(PlatformError):
    """Network trouble, throttling or a server error: the outcome is unknown, retry later."""


class PlatformConfigError(PlatformError):
    """Missing credentials or settings: the message says which environment variable to set."""


class AlreadyDone(Exception):
    """The platform says this exact request (same idempotency token) was already processed.
    ``result`` carries what could be recovered (e.g. the existing HIT id)."""

    def __init__(self, message: str, *, result: dict | None = None):
        super().__init__(message)
        self.result = result or {}


@dataclass
class TaskSpec:
    """What to publish, independent of the platform."""

    title: str
    description: str
    reward: Decimal
    n_tasks: int
    estimated_minutes: int
    request_token: str
    worker_url: str
    keywords: str = "research, reading, question answering"
    lifetime_seconds: int = 7 * 24 * 3600
    assignment_duration_seconds: int = 3600
    auto_approval_delay_seconds: int = 3 * 24 * 3600
    max_assignments_per_hit: int = 9
    qualification_requirements: list[dict] = field(default_factory=list)
    completion_code: str = ""
    currency: str = "USD"


@dataclass
class PublishedTask:
    """One thing created on the platform (an MTurk HIT, a Prolific study)."""

    external_id: str
    index: int = 0
    max_assignments: int = 0
    recovered: bool = False
    response: dict = field(default_factory=dict)


@dataclass
class RemoteSubmission:
    """A worker's assignment / submission as the platform reports it. ``status`` is normalised to
    one of submitted, approved, rejected, returned, active, expired."""

    platform_assignment_id: str
    platform_task_id: str
    worker_id: str
    status: str
    raw_status: str
    accepted_at: dt.datetime | None = None
    submitted_at: dt.datetime | None = None


@dataclass
class CostEstimate:
    platform: str
    currency: str
    n_tasks: int
    reward_per_task: Decimal
    rewards: Decimal
    fee_rate: Decimal
    fees: Decimal
    total: Decimal
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "currency": self.currency,
            "n_tasks": self.n_tasks,
            "reward_per_task": str(self.reward_per_task),
            "rewards": str(self.rewards),
            "fee_rate": str(self.fee_rate),
            "fees": str(self.fees),
            "total": str(self.total),
            "notes": list(self.notes),
        }


class CrowdPlatform(ABC):
    """The platform interface. ``token`` arguments are the platform-side idempotency tokens the
    service derived; implementations pass them on where the platform supports one."""

    name: str = ""
    currency: str = "USD"
    moves_money: bool = True

    @property
    def endpoint(self) -> str:
        return ""

    @abstractmethod
    def estimate_cost(self, *, spec_reward: Decimal, n_tasks: int, max_assignments_per_hit: int = 9) -> CostEstimate:
        ...

    @abstractmethod
    def balance(self) -> Decimal | None:
        """Available balance, or None where the platform has no such call."""

    @abstractmethod
    def publish(self, *, spec: TaskSpec, index: int = 0, max_assignments: int = 0) -> PublishedTask:
        """Create one task on the platform (idempotent through ``spec.request_token``)."""

    @abstractmethod
    def sync(self, *, external_ids: list[dict]) -> list[RemoteSubmission]:
        ...

    @abstractmethod
    def approve(self, *, platform_assignment_id: str, feedback: str = "") -> dict:
        ...

    @abstractmethod
    def reject(self, *, platform_assignment_id: str, feedback: str, category: str = "") -> dict:
        ...

    @abstractmethod
    def bonus(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal, reason: str,
              token: str, study_external_id: str = "") -> dict:
        ...

    @abstractmethod
    def block(self, *, worker_id: str, reason: str) -> dict:
        ...

    @abstractmethod
    def close(self, *, external_ids: list[dict]) -> dict:
        ...

    # Reconciliation: what the platform says about an earlier request whose answer was lost.
    # Each returns True (it was applied), False (it was not) or None (cannot tell yet).
    def was_published(self, *, spec_token: str) -> PublishedTask | None:
        return None

    def assignment_status(self, *, platform_assignment_id: str) -> str | None:
        return None

    def assignment_id_error(self, platform_assignment_id) -> str | None:
        """Why ``platform_assignment_id`` is not an id of this platform's format (None: it is)."""
        return None

    def assignment_owner(self, *, platform_assignment_id: str) -> tuple[str, str] | None:
        """(task id, worker id): the platform's task (MTurk HIT, Prolific study) it files this
        assignment under and the platform's worker who holds it, or None where the platform cannot
        say. A read: it moves nothing."""
        return None

    def bonus_was_paid(self, *, worker_id: str, platform_assignment_id: str, amount: Decimal,
                       token: str, sent_at: dt.datetime | None, reason: str = "",
                       accounted: Sequence[str] = ()) -> bool | None:
        """Was this bonus (``amount`` to ``worker_id`` on ``platform_assignment_id``, with
        ``reason`` as sent) paid? A bonus of the same amount paid earlier to the same worker on
        the same assignment is no proof: ``accounted`` holds the reason sent by each OTHER bonus
        call of this amount to this worker on this assignment that the app has confirmed, one
        entry per call. True only where the platform shows more such payments than those
        account for (on a platform that returns each payment's reason, more payments with this
        reason than the confirmed calls that sent the same reason)."""
        return None


def bonus_reason_text(reason: str | None) -> str:
    """A bonus reason as the platforms compare it: what is sent (the first 1024 characters),
    runs of whitespace made one space, ends stripped."""
    return " ".join((reason or "")[:1024].split())
