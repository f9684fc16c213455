"""Keyed pseudonyms of crowdworkers: what the API, the exports and the admin show instead of a
platform's worker id."""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from django.conf import settings


def worker_pseudonym(platform: str, external_id: str) -> str:
    """``w_`` + 16 hex digits of HMAC-SHA256(``settings.RL_PSEUDONYM_SALT``, ``platform:id``):
    stable within a deployment, not reversible (nor recomputable from a public id list) without
    the salt."""
    key = str(settings.RL_PSEUDONYM_SALT).encode("utf-8")
    msg = f"{platform}:{external_id}".encode()
    return "w_" + hmac.new(key, msg, hashlib.sha256).hexdigest()[:16]


def withdrawal_digest(study_id: int, pseudonym: str) -> str:
    """What a participant's withdrawal from a study is recorded under: 64 hex digits of
    HMAC-SHA256(``settings.RL_PSEUDONYM_SALT``, ``withdrawal``, study id, pseudonym). One-way, not
    the pseudonym (an old export cannot be joined to it) and different in every study (two
    studies' withdrawals cannot be linked); recomputable only with the salt, from the worker's
    platform id, which is how a later sync or a return of the same worker is recognised."""
    key = str(settings.RL_PSEUDONYM_SALT).encode("utf-8")
    msg = b"withdrawal\x00" + str(int(study_id)).encode() + b"\x00" + pseudonym.strip().encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


class PseudonymCache:
    """Memoises pseudonyms by participant id: computed once per worker, not once per row."""

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def get(self, participant_id: int, platform: str, external_id: str) -> str:
        value = self._cache.get(participant_id)
        if value is None:
            value = self._cache[participant_id] = worker_pseudonym(platform, external_id)
        return value


def ids_matching_pseudonyms(pseudonyms: Iterable[str], candidates: Iterable[tuple[int, str, str]]) -> list[int]:
    """The ids among ``candidates`` ((id, platform, external id) rows) whose pseudonym is one of
    ``pseudonyms``."""
    wanted = {p.strip() for p in pseudonyms if p.strip()}
    return [pk for pk, platform, external_id in candidates if worker_pseudonym(platform, external_id) in wanted]
