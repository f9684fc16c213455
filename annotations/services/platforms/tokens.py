"""Idempotency tokens. Each is derived from what it stands for (a study's batch, a bonus) and
from this installation's stored id (``Installation``), never from ``SECRET_KEY``: rotating the
key changes no token, so a bonus asked for again is still the same bonus and is paid once."""
from __future__ import annotations

import hashlib
from decimal import Decimal

from annotations.models import Assignment, Installation
from annotations.platforms.base import money
from studies.models import Study


def installation_tag() -> str:
    """This installation's id, made once (normally by the migration that added the table)."""
    row = Installation.objects.order_by("id").first()
    if row is None:
        row, _ = Installation.objects.get_or_create(pk=1)
    return row.installation_id


def publication_request_token(*, study: Study, platform: str, batch: int) -> str:
    """Deterministic per study, platform and batch (and per installation, so two deployments on
    one MTurk account never share a token)."""
    return f"rl{installation_tag()}-{platform[:2]}-s{study.pk}-b{batch}"


def bonus_token(*, assignment: Assignment, amount: Decimal, kind: str, reason: str) -> str:
    digest = hashlib.sha256(f"{assignment.pk}|{money(amount)}|{kind}|{reason.strip()}".encode()).hexdigest()
    return f"rlb{installation_tag()}-a{assignment.pk}-{digest[:24]}"[:64]


def qualification_type_name(*, study: Study, kind: str) -> str:
    return f"{study.name[:80]} qualification ({installation_tag()}-s{study.pk}-{kind})"
