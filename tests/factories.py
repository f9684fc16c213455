"""factory_boy factories for the core objects. Area-specific factories live beside their tests
(``tests/<area>/factories.py``) and build on these."""
from __future__ import annotations

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from studies.models import (
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    Item,
    Rationale,
    RationaleSource,
    Study,
)


class DatasetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Dataset
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"dataset-{n}")
    task_format = Dataset.TaskFormat.YES_NO


class MultipleChoiceDatasetFactory(DatasetFactory):
    task_format = Dataset.TaskFormat.MULTIPLE_CHOICE
    choice_labels = ["a", "b", "c", "d"]


class ItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Item

    dataset = factory.SubFactory(DatasetFactory)
    external_id = factory.Sequence(lambda n: f"item-{n}")
    question = factory.Sequence(lambda n: f"Is question number {n} answerable?")
    choices = factory.LazyFunction(lambda: list(YES_NO_CHOICES))
    gold_answer = "yes"
    gold_rationale = "Because it is."
    split = "test"


class RationaleSourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RationaleSource
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"source-{n}")
    kind = RationaleSource.Kind.IMPORTED


class RationaleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Rationale

    item = factory.SubFactory(ItemFactory)
    source = factory.SubFactory(RationaleSourceFactory)
    text = factory.Sequence(lambda n: f"Rationale text {n}.")
    predicted_answer = "yes"
    prediction_correct = True


class GeneralizationQuestionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GeneralizationQuestion

    item = factory.SubFactory(ItemFactory)
    qtype = GeneralizationQuestion.Type.REPHRASE
    text = factory.Sequence(lambda n: f"Rephrased question {n}?")
    answer = "yes"


class StudyFactory(factory.django.DjangoModelFactory):
    """A bare study row (a draft without items or sources), written directly: only for tests of
    what the services refuse, or that need a state the app cannot make (they say why). A study
    as the app makes it comes from ``tests.annotations.factories.make_study``."""

    class Meta:
        model = Study

    name = factory.Sequence(lambda n: f"study-{n}")
    kind = Study.Kind.UTILITY
    dataset = factory.SubFactory(DatasetFactory)
    split = "test"


ADMIN_APPS = ("studies", "annotations", "scoring")


def staff(username: str, *, all_model_perms: bool = True, extra=()) -> tuple[object, Client]:
    """A staff user holding every permission of the apps (but no superuser flag), raw worker ids
    aside unless ``extra`` names them."""
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True)
    perms = (Permission.objects.filter(content_type__app_label__in=ADMIN_APPS).exclude(codename="view_raw_worker_ids")
             if all_model_perms else [])
    user.user_permissions.add(*perms)
    for perm in extra:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    client = Client()
    client.force_login(user)
    return user, client
