"""The demo study, as a newcomer gets it from ``load_demo``, filled by simulated workers through
the real worker pages: every unit ends with exactly its quota of distinct workers and nobody sees
a question twice.

The demo has 20 questions x 2 sources x 5 workers = 200 answers. Since a worker may answer each
question only once (with either source), each question needs 2 x 5 = 10 different workers; so the
smallest crowd that can finish the demo is ten workers, each doing four tasks of five questions."""
from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import Count
from django.test import Client

from annotations.models import Annotation, Claim, Unit
from annotations.platforms import handoff
from studies.models import Study
from tests.annotations.pages import consent

pytestmark = pytest.mark.django_db

FIELD = {name: re.compile(rf'name="{name}" value="([^"]*)"') for name in ("claim", "step", "shown")}


def do_one_task(client: Client, entry: str) -> int:
    """Consent, answer every question before and after the reveal, finish. Returns units done
    (0 when the study has no work left for this worker)."""
    response = consent(client, entry)
    if response.status_code != 302:
        return 0
    task = response["Location"]
    page = client.get(task).content.decode()
    done = 0
    while (claim := FIELD["claim"].search(page)) is not None:
        step = FIELD["step"].search(page).group(1)
        form = {"claim": claim.group(1), "step": step, "shown": FIELD["shown"].search(page).group(1), "answer": "yes"}
        assert client.post(task + "answer", form).status_code == 302
        page = client.get(task).content.decode()
        done += step == "after"
    assert client.post(task + "submit").status_code == 302
    return done


def test_ten_simulated_workers_fill_the_demo_study_to_exactly_its_quota():
    call_command("load_demo", stdout=StringIO())
    study = Study.objects.get(name="Demo utility study")
    assert study.status == Study.Status.OPEN
    entry = f"/w/s/{handoff.study_token(study.pk)}/"

    for _worker in range(10):
        client = Client()  # a new browser: a new participant on the plain link
        while do_one_task(client, entry):
            pass

    units = Unit.objects.filter(study=study)
    assert units.count() == 40
    assert all(u.n_completed == u.quota == 5 for u in units)
    live = Claim.objects.filter(study=study, unit__isnull=False, released=False, completed_at__isnull=False)
    per_unit = live.values("unit_id").annotate(workers=Count("participant_id", distinct=True))
    assert sorted({row["workers"] for row in per_unit}) == [5]
    repeats = live.values("participant_id", "question_key").annotate(n=Count("id")).filter(n__gt=1)
    assert not repeats.exists()
    assert Annotation.objects.filter(claim__study=study, step="after").count() == 200
