"""A unit decided early while a claim was still held, whose held answer sync then puts on hold
(``stopping.units_after_hold``: still decided on the answers that count, it stays closed): its
quota holds the held claim's slot, but the answers that decided it are all it needs. Scored, it is
decided and never also "neither decided nor full" (``scoring.services.score._units_frame``), and the
full-units-only reading keeps it as it keeps every decided unit. On the fake Prolific server."""
from __future__ import annotations

import pytest

from annotations.models import PlatformSubmission, Unit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.sync import study_sync
from scoring.metrics.pipeline import ALL
from scoring.services import study_score
from scoring.services.score import EARLY_STOPPING_OPEN_WHY
from studies.models import Study
from tests.annotations.platforms.conftest import complete_assignment, start_assignment
from tests.annotations.test_holds_reopen_decided_units import counters, one_unit_on_prolific

pytestmark = pytest.mark.django_db


def test_a_decided_unit_whose_held_answer_stopped_counting_is_scored_decided_not_short(prolific):
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    rows = [server.add_submission(prolific_id, participant_id=f"p_{n}") for n in range(3)]
    rows.append(server.add_submission(prolific_id, participant_id="p_real"))
    workers = ["p_0", "p_1", "p_2", "p_fabricated"]
    tasks = [start_assignment(study, platform="prolific", worker_id=worker, assignment_id=row["id"],
                              task_id=prolific_id) for worker, row in zip(workers, rows, strict=True)]
    for task in tasks:
        complete_assignment(task)
    study_sync(study=study)
    assert PlatformSubmission.objects.get(assignment=tasks[3]).flag == PlatformSubmission.Flag.WORKER_MISMATCH
    unit = Unit.objects.get(study=study)
    assert counters(unit) == (True, 4, 4, 3)  # decided by its three counting answers; the held claim keeps its slot

    study_close(user=OPERATOR, study=study)
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error

    early = run.results["early_stopping"]
    assert early["units_decided"] == 1
    assert early["units_neither_decided_nor_full"] == 0, early
    assert EARLY_STOPPING_OPEN_WHY not in early["note"], early["note"]
    assert early["answers_saved"] == 1
    short = run.results["short_units"]
    assert short["n_short_by_source"][ALL] == 0
    assert short["utility_shares_full_units_only"] is None  # no unit short: the published shares are the full units'
    assert not any("short of the" in w for w in run.results.get("warnings", [])), run.results.get("warnings")
