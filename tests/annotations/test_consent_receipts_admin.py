"""A study's consent receipts are shown to its researchers, read-only (*Consent receipts*): who
agreed (by pseudonym), when, to which task, and whether the hash of the text they agreed to is
the study's consent text as it reads now. Another researcher sees none of them."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import ConsentReceipt
from annotations.services.entry import consent_text_sha256
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, start
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

URL = "/admin/annotations/consentreceipt/"


def test_a_studys_researchers_read_its_consent_receipts_and_nobody_else_does():
    alice, alices_client = staff_client("alice")
    _bob, bobs_client = staff_client("bob")
    study = make_study(owner=alice, n_items=2, n_sources=1)
    start(Client(), entry_url(study))  # the landing page's consent form, as a browser sends it
    receipt = ConsentReceipt.objects.select_related("participant").get(study=study)
    pid = receipt.participant.external_id
    assert receipt.consent_sha256 == consent_text_sha256(study)

    listing = alices_client.get(URL)
    page = listing.content.decode()
    assert listing.status_code == 200 and receipt.consent_sha256 in page
    assert pid not in page  # the worker by pseudonym only
    assert 'alt="True"' in page  # agreed to the text as it reads now
    detail = alices_client.get(f"{URL}{receipt.pk}/change/").content.decode()
    assert receipt.key not in detail  # the form's nonce is not shown
    assert alices_client.post(f"{URL}{receipt.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ConsentReceipt.objects.filter(pk=receipt.pk).exists()

    others = bobs_client.get(URL)
    assert others.status_code == 200 and receipt.consent_sha256 not in others.content.decode()
    assert bobs_client.get(f"{URL}{receipt.pk}/change/").status_code in (302, 404)
