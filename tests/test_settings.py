import os
import subprocess
import sys

from tests.conftest import ROOT


def _run_production_check(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.production", **env_overrides})
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_refuses_default_secret_key():
    result = _run_production_check({})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_production_refuses_debug():
    result = _run_production_check({"DJANGO_SECRET_KEY": "x" * 50, "DJANGO_DEBUG": "1"})
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be off" in result.stderr


def test_production_starts_with_a_real_secret():
    result = _run_production_check({"DJANGO_SECRET_KEY": "k" * 50})
    assert result.returncode == 0, result.stderr
