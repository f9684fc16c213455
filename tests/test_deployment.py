"""The deployment files are accepted by their tools."""
import os
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

COMPOSE = ROOT / "docker-compose.yml"


def test_compose_runs_the_full_stack_with_health_checks():
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"db", "redis", "web", "worker", "lm-worker", "beat"} <= set(services)
    for name in ("db", "redis", "web", "worker", "lm-worker"):
        assert "healthcheck" in services[name], name
    assert "gunicorn" in services["web"]["command"]
    assert "lm" in services["lm-worker"]["command"]


def test_compose_file_is_valid_for_docker_compose():
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("RL_REQUIRE_SERVICES") == "1":
            pytest.fail("docker-compose is not installed (scripts/system_deps.sh installs it)")
        pytest.skip("docker-compose not installed")
    env = {**os.environ, "DJANGO_SECRET_KEY": "x" * 50}
    result = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


def test_no_secret_in_compose_file():
    text = COMPOSE.read_text()
    assert "DJANGO_SECRET_KEY: ${DJANGO_SECRET_KEY:?" in text
