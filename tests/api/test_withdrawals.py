"""A participant's withdrawal through the API and the admin (issue 24): afterwards nothing of theirs
is in any page (worker list, worker page, answers review, progress), any export (CSV, JSON lines,
Parquet), the assignments API or the score, and the next score run says how many answers were
withdrawn."""
from __future__ import annotations

import io

import pytest
from django.test import Client

from annotations.models import Annotation, Withdrawal
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from lab.pseudonyms import worker_pseudonym
from scoring.models import ScoreRun
from scoring.services import study_score
from scoring.services.bundle import bundle_import, bundle_stream
from studies.services.sharing import study_share
from tests.api.conftest import grant
from tests.api.test_exports import READERS, download
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _url(study) -> str:
    return f"/api/v1/studies/{study.pk}/withdrawals/"


def _pages(client, study, participant_id) -> dict[str, str]:
    base = f"/admin/studies/study/{study.pk}"
    urls = {
        "workers": f"{base}/workers/",
        "answers": f"/admin/annotations/annotation/?claim__study__id__exact={study.pk}",
        "progress": f"{base}/progress.json",
        "worker": f"{base}/workers/{participant_id}/",
    }
    return {name: client.get(url) for name, url in urls.items()}


def test_a_withdrawn_participant_is_absent_from_every_page_export_and_score(client_for, study_data, researcher):
    study, leaving = study_data.study, study_data.participants[0]
    pseudonym = worker_pseudonym(leaving.platform, leaving.external_id)
    grant(researcher, "studies.change_study", "studies.view_study", "annotations.view_annotation")
    researcher.is_staff = True
    researcher.save()
    admin = Client()
    admin.force_login(researcher)
    before = _pages(admin, study, leaving.pk)
    assert all(r.status_code == 200 for r in before.values()), {k: r.status_code for k, r in before.items()}
    assert pseudonym in before["workers"].content.decode() and pseudonym in before["answers"].content.decode()
    theirs = Annotation.objects.filter(claim__participant=leaving).count()
    assert theirs > 0

    # The admin's form on the workers page.
    response = admin.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                          {"way": "pseudonym", "who": pseudonym}, follow=True)
    assert response.status_code == 200 and "Participant withdrawn" in response.content.decode()

    after = _pages(admin, study, leaving.pk)
    assert after["worker"].status_code == 404
    for name in ("workers", "answers", "progress"):
        assert after[name].status_code == 200 and pseudonym not in after[name].content.decode(), name
    assert after["progress"].json()["workers"] == before["progress"].json()["workers"] - 1
    assert "withdrew from this study" in after["workers"].content.decode()

    api = client_for(researcher)
    for file_format in ("csv", "jsonl", "parquet"):
        response, body = download(api, f"/api/v1/studies/{study.pk}/export/annotations/", file_format=file_format)
        frame = READERS[file_format](body)
        assert len(frame) == len(study_data.annotations) - theirs and pseudonym not in set(frame["worker"])
    listed = api.get("/api/v1/assignments/", {"study": study.pk}).json()["results"]
    assert listed and pseudonym not in {a["worker"] for a in listed}

    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["withdrawals"] == {"participants": 1, "answers": theirs, "counted_answers": theirs}
    assert any("withdrew" in w and str(theirs) in w for w in run.results["warnings"])
    assert run.results["agreement"]["before"]["n_annotations"] < study_data.run.results["agreement"]["before"][
        "n_annotations"]
    assert api.get(f"/api/v1/studies/{study.pk}/results/").json()["withdrawals"]["answers"] == theirs


def test_the_api_withdraws_once_and_lists_the_record_without_personal_data(client_for, study_data, researcher,
                                                                            other_researcher):
    study, leaving = study_data.study, study_data.participants[1]
    grant(researcher, "studies.change_study")
    api = client_for(researcher)

    first = api.post(_url(study), {"worker_id": leaving.external_id}, format="json")
    again = api.post(_url(study), {"pseudonym": worker_pseudonym(leaving.platform, leaving.external_id)},
                     format="json")

    assert first.status_code == 201, first.content
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert first.json()["n_answers"] == again.json()["n_answers"] > 0
    listing = api.get(_url(study))
    assert listing.status_code == 200 and [r["id"] for r in listing.json()] == [first.json()["id"]]
    text = listing.content.decode()
    assert leaving.external_id not in text and worker_pseudonym(leaving.platform, leaving.external_id) not in text
    assert listing.json()[0]["withdrawn_by"] == researcher.username
    assert not Annotation.objects.filter(claim__participant=leaving).exists()

    assert api.post(_url(study), {}, format="json").status_code == 400
    assert api.post(_url(study), {"pseudonym": "w_0000000000000000"}, format="json").status_code == 404
    # Another researcher cannot reach the study; without change rights nothing is done.
    grant(other_researcher, "studies.change_study")
    assert client_for(other_researcher).post(_url(study), {"worker_id": "x"}, format="json").status_code == 404
    viewer = client_for(researcher, read_only=True)
    assert viewer.post(_url(study), {"worker_id": study_data.participants[2].external_id},
                       format="json").status_code in (403, 405)
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert Annotation.objects.filter(claim__participant=study_data.participants[2]).exists()


def test_the_workers_page_withdrawal_needs_change_rights(study_data, make_user):
    study = study_data.study
    reader = make_user("vic", staff=True, perms=["studies.view_study"])
    study_share(study=study, user=study.owner, with_user=reader, level="view")
    client = Client()
    client.force_login(reader)
    page = client.get(f"/admin/studies/study/{study.pk}/workers/")
    assert page.status_code == 200 and "needs change rights" in page.content.decode()
    leaving = study_data.participants[0]
    response = client.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                           {"way": "worker_id", "who": leaving.external_id})
    assert response.status_code == 403
    assert client.get(f"/admin/studies/study/{study.pk}/workers/withdraw/").status_code in (403, 405)
    assert Annotation.objects.filter(claim__participant=leaving).exists() and not Withdrawal.objects.exists()



def test_the_api_withdrawal_reaches_the_bundle_copies_and_counts_those_not_yours(client_for):
    # Given alice's closed study worked by two workers, her copy of it and bob's copy (from its bundle)
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study = open_utility_study(name="api-copies", owner=alice, quota=3, n_sources=1)
    work(study, "PID")
    work(study, "PID2")
    study_close(user=OPERATOR, study=study)
    data = b"".join(bundle_stream(study=study, user=alice))
    mine = bundle_import(file=io.BytesIO(data), name="alice-copy", filename="a.zip", owner=alice)
    bobs = bundle_import(file=io.BytesIO(data), name="bob-copy", filename="b.zip", owner=bob)
    api = client_for(alice)

    # When alice withdraws PID through the API, twice
    first = api.post(_url(study), {"worker_id": "PID"}, format="json")
    again = api.post(_url(study), {"worker_id": "PID"}, format="json")

    # Then her copy lost their answers, bob's is counted (no name), and the second call reached nothing more
    assert first.status_code == 201, first.content
    assert (first.json()["copies_withdrawn"], first.json()["copies_not_changeable"]) == (1, 1)
    assert "bob-copy" not in first.content.decode() and "bob" not in first.content.decode()
    assert again.status_code == 200 and (again.json()["copies_withdrawn"], again.json()["copies_not_changeable"]) == (0, 1)
    assert Annotation.objects.filter(claim__assignment__study=mine).count() == 4
    assert Annotation.objects.filter(claim__assignment__study=bobs).count() == 8
