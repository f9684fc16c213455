"""Which study a generalization study borrows the utility of its original rationales from: the same
figures from the same answers, whoever scores and whenever (the owner deactivated, a lender re-scored)."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from scoring.services import study_score
from studies.models import GeneralizationQuestion, Study
from studies.selectors import sources_for_owner, sources_for_user, studies_for_user
from studies.services.sharing import study_share
from tests.factories import GeneralizationQuestionFactory, StudyFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db


def _generalization_study(study, items, good, owner):
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3,
                             owner=owner, name="alices-generalization")
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    collect(gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf), [("yes", "no")] * 3, start=10)
    return gen_study


def _alices_useful_study_and_generalization(utility_study, other: str):
    """Alice's scored utility study (its good-lm rationale of item 0 useful) and her generalization
    study of that item, with another researcher named ``other``: (alice, other, study, items, good,
    generalization study)."""
    User = get_user_model()
    alice, someone = User.objects.create_user("alice"), User.objects.create_user(other)
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(owner=alice, name="alices-utility")
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)  # useful
    study_score(study=study, similarity=False)
    return alice, someone, study, items, good, _generalization_study(study, items, good, alice)


def _deactivate(user):
    user.is_active = False
    user.save(update_fields=["is_active"])


def test_a_deactivated_owners_study_borrows_what_it_borrowed_while_active(utility_study):
    alice, bob, study, items, good, gen_study = _alices_useful_study_and_generalization(utility_study, "bob")
    shared = StudyFactory(dataset=study.dataset, owner=bob, name="bobs")
    study_share(study=shared, user=bob, with_user=alice)
    gen_study.sources.add(good)  # the Gen-U answerers' settings read the sources the owner's studies use
    before = study_score(study=gen_study, similarity=False).results
    while_active = set(studies_for_user(user=alice)), set(sources_for_user(user=alice))

    _deactivate(alice)
    alice.refresh_from_db()
    after = study_score(study=gen_study, similarity=False).results

    assert set(after["generalization"]["by_utility"]) == set(before["generalization"]["by_utility"]) == {"useful"}
    assert after["generalization"]["original_utility_from"] == before["generalization"]["original_utility_from"]
    assert not any("no utility for their original rationale" in w for w in after["warnings"])
    # The owner's membership still covers what it did (own and shared) for scoring's reads ...
    assert while_active[0] == {study, gen_study, shared}
    assert set(sources_for_owner(user=alice)) == while_active[1] == {good}
    # ... and the deactivated account itself still reaches nothing.
    assert not studies_for_user(user=alice).exists() and not sources_for_user(user=alice).exists()


def _pilot_and_final(utility_study, *, pilot_answers=5):
    """Alice's pilot (created first: its good-lm rationale of item 0 unsure) and final utility study
    (useful), both scored, and her generalization study of that item."""
    alice = get_user_model().objects.create_user("alice")
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(owner=alice, name="pilot")
    study.refresh_from_db()
    collect(study, make_unit(study, items[0], good, quota=pilot_answers), [("yes", "yes")] * pilot_answers)
    study_score(study=study, similarity=False)
    final = StudyFactory(annotators_per_unit=5, dataset=study.dataset, owner=alice, name="final")
    collect(final, make_unit(final, items[0], good), [("no", "yes")] * 5, start=100)
    final_run = study_score(study=final, similarity=False)
    return study, final, final_run, _generalization_study(study, items, good, alice)


def test_re_scoring_an_unchanged_pilot_does_not_move_figure_4(utility_study):
    pilot, final, final_run, gen_study = _pilot_and_final(utility_study)
    first = study_score(study=gen_study, similarity=False).results
    study_score(study=pilot, similarity=False)  # the pilot re-scored last, with the same answers
    run = study_score(study=gen_study, similarity=False)
    gen = run.results["generalization"]

    # Equal counts of annotations: the most recently created study (final) lends, both times.
    assert set(gen["by_utility"]) == set(first["generalization"]["by_utility"]) == {"useful"}
    source = gen["original_utility_from"]
    assert source["studies"] == [{"id": final.pk, "name": "final", "pairs": 1, "score_run": final_run.pk}]
    assert "most counted annotations" in source["rule"] and "scored last" in source["rule"]
    assert (source["pairs_in_several_studies"], source["pairs_the_studies_disagree_on"]) == (1, 1)
    _, items, good, _ = utility_study
    [other] = source["other_lenders"]
    assert (other["id"], other["name"], other["pairs_disagreeing"]) == (pilot.pk, "pilot", 1)
    assert other["utility"] == [[items[0].pk, good.pk, 0]]  # unsure there
    # The pilot's reading beside: the same units under 'unsure'.
    [beside] = gen["by_utility_other_lenders"]
    assert beside["id"] == pilot.pk and set(beside["by_utility"]) == {"unsure"}
    assert beside["by_utility"]["unsure"] == gen["by_utility"]["useful"]
    # The warning names the rule and the study it did not use.
    assert any("most counted annotations" in w and "not that of 'pilot' (1 pairs)" in w
               for w in run.results["warnings"])
    assert any("by_utility_other_lenders" in w for w in run.results["warnings"])


def test_the_study_with_more_counted_annotations_on_the_pair_lends(utility_study):
    pilot, final, _, gen_study = _pilot_and_final(utility_study, pilot_answers=7)
    study_score(study=final, similarity=False)
    gen = study_score(study=gen_study, similarity=False).results["generalization"]
    assert set(gen["by_utility"]) == {"unsure"}
    assert [s["id"] for s in gen["original_utility_from"]["studies"]] == [pilot.pk]
    assert [o["id"] for o in gen["original_utility_from"]["other_lenders"]] == [final.pk]


def test_a_study_another_researcher_shares_with_the_owner_lends_nothing(utility_study):
    """Mallory scores a study of Alice's item and source with more counted answers than Alice's and
    the opposite utility, and shares it with Alice (which needs only her username). Before, Alice's
    generalization study then borrowed Mallory's utility (the study with the most counted answers
    lends), its Figure 4 moved, and her own study was demoted to another lender: a share is given
    without its recipient's say. Only the owner's own studies lend."""
    alice, mallory, study, items, good, gen_study = _alices_useful_study_and_generalization(utility_study, "mallory")
    before = study_score(study=gen_study, similarity=False).results["generalization"]

    theirs = StudyFactory(dataset=study.dataset, owner=mallory, annotators_per_unit=9, name="mallorys")
    collect(theirs, make_unit(theirs, items[0], good, quota=9), [("yes", "no")] * 9, start=500)  # not useful
    study_score(study=theirs, similarity=False)
    for level in ("view", "change"):
        study_share(study=theirs, user=mallory, with_user=alice, level=level)
        after = study_score(study=gen_study, similarity=False).results["generalization"]
        assert set(after["by_utility"]) == set(before["by_utility"]) == {"useful"}
        lenders = after["original_utility_from"]
        assert [s["id"] for s in lenders["studies"]] == [study.pk]
        assert theirs.pk not in [o["id"] for o in lenders.get("other_lenders") or []]
        assert "owns" in lenders["rule"]
