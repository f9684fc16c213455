"""A study bundle is one state of the database: every file is read in one transaction
(``bundle.export.bundle_snapshot``), so what lands while it downloads (a worker starting a task, a
re-score, a withdrawal) is in none of its files rather than in some of them. The audit's probes:
a task started between tasks.csv and claims.csv made the app refuse its own bundle; a re-score
mixed one run's results.json with the next run's unit scores; a withdrawal left a worker's task
and pseudonym in and their answers out. Each test consumes the bundle partway, acts through the
services on another connection (as another request does), then finishes it and imports it.

PostgreSQL only: the action lands at once and the bundle reads the snapshot it began with. SQLite,
the development database, reads a bundle without one (a transaction there takes its one write lock
and would hold workers' answers for the whole download)."""
from __future__ import annotations

import csv
import io
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from annotations.models import Annotation, Assignment
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from scoring.api.export_annotations import keyset_pages
from scoring.models import ScoreRun
from scoring.services import study_score
from scoring.services.bundle import bundle_import, bundle_stream
from studies.models import Platform
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

POSTGRES = connection.vendor == "postgresql"
pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not POSTGRES, reason="SQLite reads a bundle without a snapshot (bundle_snapshot)")]


def _until(chunks: Iterator[bytes], path: str) -> list[bytes]:
    """The bundle's chunks up to the one that carries ``path``'s member (each small member goes out
    whole as one chunk, the next read when the next chunk is asked for)."""
    taken = []
    for chunk in chunks:
        taken.append(chunk)
        if path.encode() in chunk:
            return taken
    raise AssertionError(f"{path} never went out")


def _meanwhile(action: Callable[[], object]) -> tuple[object, BaseException | None]:
    """``action`` run on another connection (a thread: another request) while the bundle is open;
    its result and the error it raised."""
    out: dict = {}

    def run():
        try:
            out["result"] = action()
        except Exception as error:  # noqa: BLE001 - returned to the test
            out["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    return out.get("result"), out.get("error")


def _landed_or_kept_out(result, error, action):
    """The action landed while the bundle was read (PostgreSQL: the bundle reads its snapshot)."""
    assert error is None, error
    return result


def _table(files: dict[str, bytes], path: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(files[path].decode("utf-8"))))


def _read(data: bytes) -> dict[str, bytes]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    return {name: archive.read(name) for name in archive.namelist()}


def _consistent(files: dict[str, bytes]) -> None:
    """The tasks the claims name are tasks.csv's, by their workers (each of these tasks holds its
    claims), and so are the answers'; the answers' scores are the run settings.json and results.json
    name."""
    tasks = {row["id"]: row["worker"] for row in _table(files, "data/tasks.csv")}
    claims = _table(files, "data/claims.csv")
    answers = _table(files, "data/annotations.csv")
    assert {(c["task_id"], c["worker"]) for c in claims} == set(tasks.items())
    assert {(a["assignment_id"], a["worker"]) for a in answers} <= set(tasks.items())
    settings = json.loads(files["settings.json"])
    run = settings["latest_run"]["score_run"]
    if "results.json" in files:
        assert json.loads(files["results.json"])["run"]["id"] == run
    assert {a["score_run"] for a in answers} <= {str(run), ""}
    assert (settings.get("scores_stale") or {}).get("score_run", run) == run


def _worked(name: str, *, workers=("W1", "W2"), quota: int = 3):
    alice, client = staff_client("alice")
    study = open_utility_study(name=name, owner=alice, quota=quota, n_items=2, n_sources=1)
    for worker in workers:
        work(study, worker)
    return alice, client, study


def test_a_task_started_while_the_bundle_downloads_is_in_none_of_its_files():
    alice, client, study = _worked("started")
    response = client.get(f"/api/v1/studies/{study.pk}/bundle/")  # the view streams bundle_stream
    assert response.status_code == 200
    chunks = iter(response.streaming_content)
    head = _until(chunks, "data/tasks.csv")

    action = lambda: work(study, "W3", submit=False)  # noqa: E731 - a worker starts a task
    started, error = _meanwhile(action)
    files = _read(data := b"".join(head + list(chunks)))
    _consistent(files)
    started = _landed_or_kept_out(started, error, action)
    assert worker_pseudonym(Platform.PROLIFIC, "W3") not in files["data/tasks.csv"].decode()
    assert len(_table(files, "data/tasks.csv")) == 2
    copy = bundle_import(file=io.BytesIO(data), name="started-copy", owner=alice)  # the app takes its own bundle
    assert Assignment.objects.filter(study=copy).count() == 2
    assert Assignment.objects.filter(study=study).count() == 3 and started.study_id == study.pk


def test_a_rescore_while_the_bundle_downloads_leaves_it_the_first_runs():
    alice, _, study = _worked("rescored")
    first = study_score(study=study, similarity=False)
    work(study, "W3")  # a third answer to each unit: the next run aggregates 3
    chunks = bundle_stream(study=study, user=alice)
    head = _until(chunks, "data/tasks.csv")

    action = lambda: study_score(study=study, similarity=False)  # noqa: E731
    second, error = _meanwhile(action)
    files = _read(data := b"".join(head + list(chunks)))
    _consistent(files)
    second = _landed_or_kept_out(second, error, action)
    assert second.status == ScoreRun.Status.DONE and second.pk != first.pk
    assert json.loads(files["settings.json"])["latest_run"]["score_run"] == first.pk
    assert {row["n_annotators"] for row in _table(files, "data/unit_scores.csv")} == {"2"}  # the first run's
    assert {row["score_run"] for row in _table(files, "data/annotations.csv")} == {str(first.pk)}
    stale = json.loads(files["settings.json"])["scores_stale"]
    assert (stale["score_run"], stale["stale"], stale["stale_units"]) == (first.pk, True, 2)  # W3 came after it
    bundle_import(file=io.BytesIO(data), name="rescored-copy", owner=alice)


def test_a_withdrawal_while_the_bundle_downloads_takes_the_worker_out_of_every_file_or_none():
    alice, _, study = _worked("withdrawn", workers=("W1", "W2", "W3"))
    run = study_score(study=study, similarity=False)
    pseudonym = worker_pseudonym(Platform.PROLIFIC, "W1")
    chunks = bundle_stream(study=study, user=alice)
    head = _until(chunks, "data/tasks.csv")

    action = lambda: participant_withdraw(user=alice, study=study, worker_id="W1")  # noqa: E731
    outcome, error = _meanwhile(action)
    files = _read(data := b"".join(head + list(chunks)))
    _consistent(files)
    outcome = _landed_or_kept_out(outcome, error, action)
    assert outcome.created
    # read before the withdrawal: the worker's task, claims and answers all in, the scores not stale
    assert [row["worker"] for row in _table(files, "data/tasks.csv")].count(pseudonym) == 1
    assert [row["worker"] for row in _table(files, "data/claims.csv")].count(pseudonym) == 2
    assert [row["worker"] for row in _table(files, "data/annotations.csv")].count(pseudonym) == 4
    stale = json.loads(files["settings.json"])["scores_stale"]
    assert (stale["score_run"], stale["stale"], stale["withdrawn_since_run"]["participants"]) == (run.pk, False, 0)
    bundle_import(file=io.BytesIO(data), name="withdrawn-copy", owner=alice)
    # a bundle begun after it holds nothing of theirs, and says its scores are stale
    after = _read(b"".join(bundle_stream(study=study, user=alice)))
    assert not any(pseudonym.encode() in content for content in after.values())
    assert json.loads(after["settings.json"])["scores_stale"]["stale"] is True


def test_the_bundle_reads_one_transaction_that_writes_nothing():
    """The bundle's transaction ends with it (nothing left open on the connection) and, on
    PostgreSQL, is REPEATABLE READ and READ ONLY: nothing a bundle reads writes."""
    alice, _, study = _worked("one-transaction")
    study_score(study=study, similarity=False)
    chunks = bundle_stream(study=study, user=alice)
    _until(chunks, "study.json")
    assert connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        assert cursor.fetchone()[0] == "repeatable read"
        cursor.execute("SHOW transaction_read_only")
        assert cursor.fetchone()[0] == "on"
    list(chunks)
    assert not connection.in_atomic_block

    # a client that goes away mid-download ends it too
    chunks = bundle_stream(study=study, user=alice)
    _until(chunks, "data/tasks.csv")
    chunks.close()
    assert not connection.in_atomic_block


def test_a_plain_export_holds_no_transaction_between_its_pages():
    """Outside a bundle the annotation export's read-ahead reads each page in a short transaction of
    its own (``keyset_pages``): a download that takes minutes leaves no connection idle in a
    transaction (behind PgBouncer it would keep a server connection for the whole download)."""
    _worked("plain-export", workers=("W1", "W2", "W3"))
    pages = keyset_pages(Annotation.objects.order_by("id").values_list("id"), page_rows=1, ahead=1)
    assert next(pages)
    time.sleep(0.5)  # the reader reads ahead and waits for the caller
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND state = 'idle in transaction'")
        idle_in_transaction = cursor.fetchone()[0]
    pages.close()
    assert idle_in_transaction == 0
