"""The content rule against a study opening at the same moment, on PostgreSQL: the check locks the
studies using the row, so an edit that arrives while a study is opening waits for the opening and
is then refused (never written under a study that has just opened).

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (which has one writer at a time)."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import Rationale, Study
from studies.services.content import ContentChangeRefused, content_row_save
from tests.annotations.factories import make_study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def test_an_edit_during_the_opening_waits_for_it_and_is_refused():
    draft = make_study(n_items=1, n_sources=1, status=Study.Status.DRAFT, rationale_text="ORIGINAL {item}")
    rationale = Rationale.objects.get(item__in=draft.items.all())
    outcome: list = []

    def edit():
        try:
            mine = Rationale.objects.get(pk=rationale.pk)
            mine.text = "EDITED while the study opened"
            content_row_save(user=None, obj=mine, changed=["text"])
            outcome.append("saved")
        except ContentChangeRefused as refused:
            outcome.append(refused)
        finally:
            connections.close_all()

    with transaction.atomic():
        study_open(study=draft, user=OPERATOR)  # holds the study's row lock until this block commits
        editor = threading.Thread(target=edit)
        editor.start()
        time.sleep(1.0)
        assert outcome == []  # the edit waits for the opening
    editor.join(timeout=30)

    assert len(outcome) == 1 and isinstance(outcome[0], ContentChangeRefused)
    assert draft.name in str(outcome[0])
    rationale.refresh_from_db()
    assert rationale.text == "ORIGINAL 0"
