"""An account that owns a study, made a platform call or granted a bonus cannot be deleted, nor one
that published, handed out a link, decided a flag, blocked a worker, withdrew a participant, made a
question generator, started an LM job or imported a file.

``Study.owner``, ``PlatformCall.user`` and ``Bonus.created_by`` were ``SET_NULL``: a superuser
deleting Alice at the admin's user delete page left her studies owner-less, and an owner-less study
borrows Figure 4's utility from the operator's studies only, so re-scoring changed her generalization
study's by_utility and the operator's; every call and bonus she made lost who made it (the README:
"who and when are kept on the call"). They are ``PROTECT`` now: every path (the delete page, the
changelist's "delete selected", the shell, a service) is refused with Django's protected-objects
message, and the account is kept (deactivate it instead). An account without such rows is deleted
as before; a study made by the operator keeps no owner.

The admin pages list every protected row and say to deactivate: the platform-call and bonus admins
delete nothing, and Django named their types as a permission the superuser lacked instead of the
protected rows (Alice's study went unnamed, nothing said "protected" or "deactivate").

The other records of who acted were ``SET_NULL`` too, and for some an empty value means something
else: a generator without a maker is the operator's (changed by whoever may change owner-less
generators), so deleting its researcher handed it over; a publication, link, flag decision, block,
withdrawal, LM job or import lost who committed the money, admitted or judged the worker, erased
their answers, spent the compute or wrote the rows. They are ``PROTECT`` now, listed the same way."""
from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from django.utils.text import capfirst

from annotations.models import (
    Bonus,
    FlagReview,
    OpenLink,
    ParticipantLink,
    PlatformCall,
    Publication,
    Withdrawal,
    WorkerBlock,
)
from annotations.services.flags import flag_accept
from annotations.services.links import links_generate, open_link_create
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.withdrawal import participant_withdraw
from studies.admin.users import PROTECTED_SHOWN
from studies.models import GenerationJob, ImportRecord, QuestionGenerator, RationaleSource, Study, StudyShare
from studies.selectors import CHANGE, question_generators_for_user
from studies.services.importers import import_run
from studies.services.sharing import study_share
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import prolific, prolific_server, submitted  # noqa: F401
from tests.annotations.platforms.test_flags_and_holds import _flagged_work
from tests.annotations.test_services_withdrawal import done, pseudonym
from tests.cockpit.conftest import staff_client
from tests.studies.lm.test_job_start_rights import RESEARCHER, _job, _user, dev_items, server  # noqa: F401

pytestmark = pytest.mark.django_db

PROTECTED = "would require deleting the following protected related objects"
LACKING = "doesn't have permission to delete the following types of objects"
DEACTIVATE = "deactivate it instead (untick Active on the account's page)"
USERS = "/admin/auth/user/"


def _superuser_client() -> Client:
    root = get_user_model().objects.create_superuser(username="root", password="pw", email="root@example.org")
    client = Client()
    client.force_login(root)
    return client


def _text(page) -> str:
    """The admin page's content area as text."""
    html = page.content.decode()
    return " ".join(re.sub(r"<[^>]+>", " ", html[html.find('id="content"'):]).split())


def _messages(page) -> str:
    """The messages shown above the admin page's content, as text."""
    html = page.content.decode()
    start = html.find('class="messagelist"')
    return "" if start < 0 else " ".join(unescape(re.sub(r"<[^>]+>", " ", html[start:html.find("</ul>", start)])).split())


def _listed(obj) -> str:
    """How the admin's delete page names a protected row (Django's ``get_deleted_objects``)."""
    return escape(f"{capfirst(obj._meta.verbose_name)}: {obj}")


def _refused_on_the_admin(client: Client, user, rows) -> None:
    """The delete page and "Delete selected" refuse ``user``, listing each of ``rows`` as protected."""
    for page in (client.get(f"{USERS}{user.pk}/delete/"),
                 client.post(f"{USERS}{user.pk}/delete/", {"post": "yes"}),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [user.pk], "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert PROTECTED in refusal and LACKING not in refusal, refusal
        assert all(_listed(row) in refusal for row in rows), (refusal, [_listed(row) for row in rows])
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=user.pk).exists()


def _protected(user) -> set:
    """The rows Django names when ``user.delete()`` is refused."""
    with pytest.raises(ProtectedError) as refused:
        user.delete()
    return set(refused.value.protected_objects)


@pytest.fixture
def paid_by_bob(prolific):  # noqa: F811
    """(alice, who owns a study on Prolific and published it; bob, who owns nothing and paid a
    bonus on her study through a pay share; the study; bob's bonus)."""
    _, platform = prolific
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=alice,
                       estimated_minutes_per_task=Decimal("6.0"), name="alices-study", platform="prolific")
    publication = study_publish(user=alice, study=study, platform_name="prolific")
    sub = platform.add_submission(publication.prolific_study_id, participant_id="pworker1")
    task = submitted(study, platform="prolific", worker_id="pworker1", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    study_share(study=study, user=alice, with_user=bob, level=StudyShare.Level.PAY)
    bonus = bonus_pay(user=bob, study=study, assignment=task, amount="0.50", reason="careful work")
    assert bonus.status == Bonus.Status.PAID and bonus.created_by_id == bob.pk
    return alice, bob, study, bonus


def test_the_owner_of_a_study_is_not_deleted_on_the_admin_page_nor_in_the_shell():
    carol, _ = staff_client("carol")
    study = make_study(owner=carol, name="carols-study")
    client = _superuser_client()

    for page in (client.post(f"{USERS}{carol.pk}/delete/", {"post": "yes"}),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [carol.pk], "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert PROTECTED in refusal and "Study: carols-study" in refusal, refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=carol.pk).exists()

    assert _protected(carol) == {study}
    assert Study.objects.get(pk=study.pk).owner_id == carol.pk  # the study keeps its owner, still open
    assert Study.objects.get(pk=study.pk).status == Study.Status.OPEN


def test_who_made_a_platform_call_or_a_bonus_is_not_deleted(paid_by_bob):
    alice, bob, study, bonus = paid_by_bob
    bobs_calls = set(PlatformCall.objects.filter(user=bob))
    alices_calls = set(PlatformCall.objects.filter(user=alice))
    assert bobs_calls and alices_calls
    publication = Publication.objects.get(study=study)
    assert publication.created_by_id == alice.pk
    client = _superuser_client()

    # The platform-call and bonus admins delete nothing, yet the refusal lists Bob's bonus and calls
    # as the protected rows they are (not their types as a permission the superuser lacks).
    for page in (client.get(f"{USERS}{bob.pk}/delete/"),
                 client.post(f"{USERS}{bob.pk}/delete/", {"post": "yes"}),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [bob.pk], "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert "Cannot delete user" in refusal or "Cannot delete users" in refusal, refusal
        assert PROTECTED in refusal and LACKING not in refusal, refusal
        assert f"Bonus: {bonus}" in refusal, refusal
        assert all(f"Platform call: {call}" in refusal for call in bobs_calls), refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=bob.pk).exists()

    # Alice's page names her study beside her calls, all of them protected.
    for page in (client.get(f"{USERS}{alice.pk}/delete/"),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [alice.pk, bob.pk],
                                     "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert PROTECTED in refusal and LACKING not in refusal, refusal
        assert "Study: alices-study" in refusal, refusal
        assert all(f"Platform call: {call}" in refusal for call in alices_calls), refusal
        assert _listed(publication) in refusal, refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=alice.pk).exists()

    # Bob owns nothing: his bonus and his calls alone keep his account.
    assert _protected(bob) == {bonus, *bobs_calls}
    # Alice owns the study, published it and made its publishing calls: each keeps her account.
    assert _protected(alice) == {study, publication, *alices_calls}

    assert Bonus.objects.get(pk=bonus.pk).created_by_id == bob.pk
    assert set(PlatformCall.objects.filter(user=bob)) == bobs_calls
    assert set(PlatformCall.objects.filter(user=alice)) == alices_calls
    assert Publication.objects.get(pk=publication.pk).created_by_id == alice.pk


def test_an_account_without_studies_calls_or_bonuses_is_deleted_and_the_operators_study_stays_ownerless():
    dave, _ = staff_client("dave")
    erin, _ = staff_client("erin")
    operators = make_study(name="operators-study")  # no owner: the operator's
    client = _superuser_client()

    page = client.get(f"{USERS}{dave.pk}/delete/")
    assert page.status_code == 200 and "Are you sure" in _text(page), _text(page)
    assert PROTECTED not in _text(page) and DEACTIVATE not in _messages(page)
    page = client.post(f"{USERS}{dave.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302
    erin.delete()
    assert not get_user_model().objects.filter(username__in=["dave", "erin"]).exists()
    assert Study.objects.get(pk=operators.pk).owner_id is None


def test_who_made_a_generator_started_an_lm_job_or_imported_is_not_deleted_and_the_generator_stays_theirs(
        dev_items, server, tmp_path):  # noqa: F811
    # Gina owns no study. She adds a question generator on the admin page, starts an LM job and
    # imports items. A generator with no maker is the operator's, which whoever may change owner-less
    # generators changes: deleting Gina handed hers to Hal. Her job and import lost who ran them.
    gina = _user("gina", *RESEARCHER, "studies.add_questiongenerator", "studies.change_questiongenerator",
                 "studies.view_questiongenerator", "studies.add_importrecord", "studies.add_dataset",
                 "studies.add_item", "studies.change_dataset")
    hal = _user("hal", "studies.view_questiongenerator", "studies.change_questiongenerator")
    ginas_client = Client()
    ginas_client.force_login(gina)
    added = ginas_client.post(reverse("admin:studies_questiongenerator_add"), {
        "name": "ginas-gen", "backend": "seq2seq", "model_name_or_path": "/m/gina", "seed": 0,
        "instructions": "{}", "demonstrations": "{}", "decoding": "{}"})
    assert added.status_code == 302, added.content.decode()[:2000]
    generator = QuestionGenerator.objects.get(name="ginas-gen")
    source = RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url)
    job = _job(source, dev_items, gina)
    items = tmp_path / "ginas_items.csv"
    items.write_text("id,question,answer,split\n" + "".join(f"g{i},Is fact {i} true?,yes,train\n" for i in range(3)))
    record = import_run(kind="items", file=items, dataset_name="ginas-ds", task_format="yes_no", user=gina)
    assert (generator.created_by_id, job.created_by_id, record.imported_by_id) == (gina.pk, gina.pk, gina.pk)
    assert not question_generators_for_user(user=hal, access=CHANGE).filter(pk=generator.pk).exists()

    _refused_on_the_admin(_superuser_client(), gina, [generator, job, record])
    assert _protected(gina) == {generator, job, record}

    # The generator is still Gina's (not the operator's, so not Hal's to change), and so are her job
    # and her import.
    assert QuestionGenerator.objects.get(pk=generator.pk).created_by_id == gina.pk
    assert not question_generators_for_user(user=hal, access=CHANGE).filter(pk=generator.pk).exists()
    assert GenerationJob.objects.get(pk=job.pk).created_by_id == gina.pk
    assert ImportRecord.objects.get(pk=record.pk).imported_by_id == gina.pk


def test_who_handed_out_links_decided_a_flag_blocked_or_withdrew_a_worker_is_not_deleted():
    # Fay owns no study: Alice shares hers with her to pay. Fay hands out links, accepts a worker's
    # flag (which makes the task eligible for the flag bonus), blocks that worker and withdraws another.
    alice, _ = staff_client("alice")
    fay, _ = staff_client("fay")
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2, owner=alice, name="alices-lab-study")
    study_share(study=study, user=alice, with_user=fay, level=StudyShare.Level.PAY)
    links = links_generate(study=study, n=2, user=fay, label="seat")
    open_link = open_link_create(study=study, user=fay)
    work, flagged = _flagged_work(study)
    review = flag_accept(annotation=flagged, user=fay)
    block = worker_block(user=fay, study=study, participant=work.participant, reason="rushed through")
    leaving = done(study)
    withdrawal = participant_withdraw(user=fay, study=study, pseudonym=pseudonym(leaving.participant)).withdrawal
    rows = [*links, open_link, review, block, withdrawal]

    _refused_on_the_admin(_superuser_client(), fay, rows)
    assert _protected(fay) == set(rows)

    assert {link.created_by_id for link in ParticipantLink.objects.filter(study=study)} == {fay.pk}
    assert OpenLink.objects.get(pk=open_link.pk).created_by_id == fay.pk
    assert FlagReview.objects.get(pk=review.pk).decided_by_id == fay.pk
    # The block still covers what it covered: its study (Fay owns none).
    assert WorkerBlock.objects.get(pk=block.pk).researcher_id == fay.pk
    assert Withdrawal.objects.get(pk=withdrawal.pk).withdrawn_by_id == fay.pk


def test_the_delete_page_names_a_few_rows_of_each_type_and_counts_the_rest(django_assert_max_num_queries):
    # Before, the page named every protected row, a query each: 5,000 participant links made 5,040
    # queries and 4.9 s. Now the first PROTECTED_SHOWN of each type by id, then how many more.
    alice, _ = staff_client("alice")
    fay, _ = staff_client("fay")
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2, owner=alice, name="alices-lab-study")
    study_share(study=study, user=alice, with_user=fay, level=StudyShare.Level.PAY)
    links = sorted(links_generate(study=study, n=PROTECTED_SHOWN + 25, user=fay, label="seat"), key=lambda link: link.pk)
    open_link = open_link_create(study=study, user=fay)
    client = _superuser_client()
    client.get(f"{USERS}{fay.pk}/delete/")  # the client's session and the admin's first reads

    with django_assert_max_num_queries(2 * PROTECTED_SHOWN + 25):
        page = client.get(f"{USERS}{fay.pk}/delete/")
    refusal = _text(page)
    assert PROTECTED in refusal and LACKING not in refusal, refusal
    assert all(_listed(link) in refusal for link in links[:PROTECTED_SHOWN])
    assert _listed(links[PROTECTED_SHOWN]) not in refusal
    assert "... and 25 more participant links" in refusal
    assert _listed(open_link) in refusal
    assert get_user_model().objects.filter(pk=fay.pk).exists()
