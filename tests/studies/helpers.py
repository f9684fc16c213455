"""Small helpers for writing broken copies of real files, and the researchers of a shared study."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.annotations.factories import make_study
from tests.factories import ItemFactory, RationaleFactory


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


IMPORT = "studies.add_importrecord"
RESEARCHER = ("studies.add_study", "studies.view_study", "studies.change_study", IMPORT)


def researcher(name: str, *perms: str):
    """A staff user holding only ``perms`` (``app_label.codename``), fetched again so that the
    permissions are not cached on the instance."""
    user = get_user_model().objects.create_user(username=name, password="pw-" + name, is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return get_user_model().objects.get(pk=user.pk)


def olgas_lab() -> SimpleNamespace:
    """Olga's open study of the test split of her dataset, with one source; the train split holds
    "train-0" (gold "yes"), in no study, with Olga's rationale from that source. Built as the app
    builds it (``make_study``); share it with another researcher with ``study_share``."""
    olga = researcher("olga", *RESEARCHER)
    study = make_study(n_items=2, n_sources=1, status="open", owner=olga, name="olgas-study")
    source = study.sources.get()
    train = ItemFactory(dataset=study.dataset, split="train", external_id="train-0",
                        question="Olga's train question?", gold_answer="yes")
    rationale = RationaleFactory(item=train, source=source, text="Olga's train rationale.")
    return SimpleNamespace(olga=olga, study=study, dataset=study.dataset, source=source, train=train,
                           rationale=rationale)
