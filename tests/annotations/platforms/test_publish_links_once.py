"""Simultaneous publishes of a link study make one set of links (PostgreSQL).

Every concurrent publish gets the same publication still publishing (``_publication_claim``);
before, each one read "no links yet" with no lock held and made a full set: four threads made
56/42/28 single-person links for 14 tasks, or four open links. Now the links are made under a
lock on the publication, checked again there, so a publish that comes second sees them and makes
none.

Run with ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_linkpub``; skipped on SQLite."""
from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from annotations.models import OpenLink, ParticipantLink, Publication
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import Study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

N_CALLERS = 4
N_TASKS = 14  # the ``study`` fixture: 4 items x 2 sources x 5 answers in tasks of 3 units


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def _together(n: int, act) -> list:
    """Run ``act()`` in ``n`` threads released at once, each on its own connection (closed at its
    end); the errors raised, as repr."""
    barrier = threading.Barrier(n)
    errors: list = []

    def one():
        try:
            barrier.wait()
            act()
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(repr(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a publish hung"
    return errors


def _one_published_link_publication(study) -> Publication:
    publications = list(Publication.objects.filter(study=study, dry_run=False))
    assert [p.status for p in publications] == [Publication.Status.PUBLISHED]
    return publications[0]


def test_simultaneous_publishes_make_one_set_of_single_person_links(study):
    errors = _together(N_CALLERS, lambda: study_publish(
        study=Study.objects.get(pk=study.pk), user=OPERATOR, platform_name="link",
        options={"link_mode": "single"}))

    assert errors == []
    publication = _one_published_link_publication(study)
    assert ParticipantLink.objects.filter(study=study).count() == N_TASKS
    assert publication.participant_links.count() == N_TASKS
    assert not OpenLink.objects.filter(study=study).exists()


def test_simultaneous_publishes_make_one_open_link(study):
    errors = _together(N_CALLERS, lambda: study_publish(
        study=Study.objects.get(pk=study.pk), user=OPERATOR, platform_name="link",
        options={"link_mode": "open"}))

    assert errors == []
    publication = _one_published_link_publication(study)
    links = list(OpenLink.objects.filter(study=study))
    assert [(link.publication_id, link.max_participants) for link in links] == [(publication.pk, N_TASKS)]
    assert not ParticipantLink.objects.filter(study=study).exists()


def test_two_researchers_pressing_publish_on_the_admin_page_make_one_set_of_links(study):
    researcher = get_user_model().objects.create_superuser("dana", "dana@example.org", "pw")
    url = reverse("admin:annotations_publication_publish", args=[study.pk])
    statuses: list = []

    def press():
        client = Client()
        client.force_login(researcher)
        statuses.append(client.post(url, {"action": "publish", "platform": "link", "link_mode": "single"})
                        .status_code)

    errors = _together(2, press)

    assert errors == [] and statuses == [302, 302]
    _one_published_link_publication(study)
    assert ParticipantLink.objects.filter(study=study).count() == N_TASKS
