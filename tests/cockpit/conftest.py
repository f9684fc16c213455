"""Fixtures of the cockpit tests: a researcher who owns the study and a clock the tests move."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.clock import Clock, clock_installed

ADMIN_APPS = ("studies", "annotations", "scoring")


def staff_client(username: str, *, perms: bool = True, pay: bool = True) -> tuple[object, Client]:
    """A staff researcher (not a superuser) holding the apps' model permissions (less
    ``studies.pay_workers`` unless ``pay``), and a client logged in as them."""
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True)
    if perms:
        granted = Permission.objects.filter(content_type__app_label__in=ADMIN_APPS).exclude(
            codename="view_raw_worker_ids")
        if not pay:
            granted = granted.exclude(codename="pay_workers")
        user.user_permissions.add(*granted)
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def dana():
    return staff_client("dana")


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """``timezone.now`` under the test's control (the services and ``auto_now`` read it)."""
    return clock_installed(monkeypatch)
