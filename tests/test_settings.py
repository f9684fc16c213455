import os
import re
import secrets
import subprocess
import sys

import pytest
from django.test import override_settings

from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import make_study
from tests.annotations.test_services_withdrawal import done
from tests.conftest import ROOT


def _production_env(env_overrides: dict[str, str]) -> dict[str, str]:
    """This environment without the production secrets (the test sets the ones it means)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_") and k != "RL_PSEUDONYM_SALT"}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.production", **env_overrides})
    return env


def _run_production_check(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=_production_env(env_overrides), capture_output=True,
        text=True, timeout=120,
    )


def test_production_refuses_default_secret_key():
    result = _run_production_check({"RL_PSEUDONYM_SALT": "s" * 50})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_production_refuses_debug():
    result = _run_production_check({"DJANGO_SECRET_KEY": "x" * 50, "RL_PSEUDONYM_SALT": "s" * 50, "DJANGO_DEBUG": "1"})
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be off" in result.stderr


def test_production_starts_with_a_real_secret():
    result = _run_production_check({"DJANGO_SECRET_KEY": "k" * 50, "RL_PSEUDONYM_SALT": "s" * 50})
    assert result.returncode == 0, result.stderr


def test_production_refuses_to_start_without_a_pseudonym_salt_of_its_own():
    """The salt keys every withdrawal record, block and pseudonym; falling back to the secret key
    (which the README has operators generate per host and rotate) forgot every withdrawal on a
    restore or a rotation. Production asks for it and says how an existing deployment keeps its data;
    a short value an operator set is kept (changing it would lose what it keys)."""
    assert _production_salt({"DJANGO_SECRET_KEY": "k" * 50, "RL_PSEUDONYM_SALT": "short"}) == "short"
    for overrides in ({}, {"RL_PSEUDONYM_SALT": "  "}):
        result = _run_production_check({"DJANGO_SECRET_KEY": "k" * 50, **overrides})
        assert result.returncode != 0, f"production started with {overrides or 'no RL_PSEUDONYM_SALT'}"
        assert "ImproperlyConfigured: RL_PSEUDONYM_SALT must be set" in result.stderr
        assert "the value DJANGO_SECRET_KEY has had so far" in result.stderr
        assert "keeps it with the database's backups" in result.stderr


def _production_salt(env_overrides: dict[str, str]) -> str:
    """The pseudonym salt the production settings resolve to in this environment."""
    result = subprocess.run(
        [sys.executable, "-c", "from config.settings import production; print(production.RL_PSEUDONYM_SALT)"],
        cwd=ROOT, env=_production_env(env_overrides), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _production_csrf_origins(env_overrides: dict[str, str]) -> list[str]:
    """The trusted CSRF origins the production settings resolve to in this environment."""
    env = _production_env(env_overrides)
    if "RL_PUBLIC_URL" not in env_overrides:
        env.pop("RL_PUBLIC_URL", None)
    result = subprocess.run(
        [sys.executable, "-c", "from config.settings import production; print(*production.CSRF_TRUSTED_ORIGINS)"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_production_trusts_the_public_url_origin_unless_told_otherwise():
    """Unset or empty (docker-compose.yml passes it empty), DJANGO_CSRF_TRUSTED_ORIGINS is the origin
    of RL_PUBLIC_URL, where browsers are sent: a proxy in front that rewrites the Host or terminates
    TLS does not refuse every form. A value set is the whole list."""
    secrets_env = {"DJANGO_SECRET_KEY": "k" * 50, "RL_PSEUDONYM_SALT": "s" * 50}
    public = {**secrets_env, "RL_PUBLIC_URL": "https://lab.example.org:8443/rl/"}
    assert _production_csrf_origins(public) == ["https://lab.example.org:8443"]
    assert _production_csrf_origins({**public, "DJANGO_CSRF_TRUSTED_ORIGINS": ""}) == ["https://lab.example.org:8443"]
    assert _production_csrf_origins(secrets_env) == ["http://127.0.0.1:8000"]  # RL_PUBLIC_URL's default
    assert _production_csrf_origins({**public, "DJANGO_CSRF_TRUSTED_ORIGINS": "https://a.example, https://b.example"}) == [
        "https://a.example", "https://b.example"]


@pytest.mark.django_db
def test_rotating_the_secret_key_keeps_a_withdrawal_recognised():
    """Restoring on a host with a new DJANGO_SECRET_KEY, or rotating it, keeps the salt (it is its own
    setting), so the withdrawn worker is still refused a task in the study."""
    salt, old_key, new_key = secrets.token_urlsafe(40), secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    before = _production_salt({"DJANGO_SECRET_KEY": old_key, "RL_PSEUDONYM_SALT": salt})
    after = _production_salt({"DJANGO_SECRET_KEY": new_key, "RL_PSEUDONYM_SALT": salt})
    assert before == after == salt
    with override_settings(SECRET_KEY=old_key, RL_PSEUDONYM_SALT=before):
        study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2)
        leaving = done(study)
        pseudonym = worker_pseudonym(leaving.participant.platform, leaving.participant.external_id)
        assert participant_withdraw(user=OPERATOR, study=study, pseudonym=pseudonym).created
    with override_settings(SECRET_KEY=new_key, RL_PSEUDONYM_SALT=after):
        with pytest.raises(ParticipantBlocked):
            assignment_start(study=study, participant=leaving.participant)
    # What the old fallback did: a salt that follows the key forgets the withdrawal.
    with override_settings(SECRET_KEY=new_key, RL_PSEUDONYM_SALT=new_key):
        assert assignment_start(study=study, participant=leaving.participant).participant == leaving.participant


# --- configuration: one place, documented (issue 11) ------------------------------------------------

APPS = ("lab", "studies", "annotations", "scoring", "cockpit")
READS = re.compile(r'settings\.(RL_\w+)|getattr\(\s*settings,\s*"(RL_\w+)"')
ENV_READS = re.compile(r'(?:os\.environ(?:\.get)?[\[(]|env_\w+\()\s*"(RL_\w+)"')


def _app_sources():
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path, path.read_text()


def test_every_rl_setting_an_app_reads_is_declared_and_in_the_readme():
    from django.conf import settings

    table = "\n".join(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `"))
    read = {name for _, text in _app_sources() for match in READS.finditer(text) for name in match.groups() if name}
    assert read, "the pattern finds the settings the apps read"
    undeclared = sorted(name for name in read if not hasattr(settings, name))
    assert undeclared == []
    defaults = sorted(f"{path.name}: {m.group(0)}" for path, text in _app_sources()
                      for m in re.finditer(r'getattr\(\s*settings,\s*"RL_\w+"', text))
    assert defaults == [], "read declared settings as settings.RL_..., without a second default"
    environment = set(ENV_READS.findall((ROOT / "config" / "settings" / "base.py").read_text()))
    assert {"RL_MAX_IMPORT_BYTES", "RL_FIRST_ANSWER_MINUTES"} <= environment
    undocumented = sorted(name for name in environment | (read - {"RL_API_THROTTLE_RATES"})
                          if f"`{name}`" not in table)
    assert undocumented == []


def test_every_rl_variable_the_scripts_and_tests_read_is_in_the_readme():
    """The harness's own variables (scripts, test fixtures, benchmarks, the container files) are
    documented too, not only the app's settings: RL_REQUIRE_SERVICES and RL_CHROMIUM were not."""
    readme = (ROOT / "README.md").read_text()
    places = [ROOT / name for name in ("Dockerfile", "docker-compose.yml", "manage.py", "pyproject.toml")]
    for folder in ("scripts", "tests", "benchmarks", "config", ".ci", *APPS):
        places += [path for path in (ROOT / folder).rglob("*") if "__pycache__" not in path.parts]
    named = set()
    for path in places:
        if path.suffix == ".md" or not path.is_file() or path.stat().st_size > 1_000_000:
            continue
        try:
            named |= set(re.findall(r"\bRL_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
        except UnicodeDecodeError:
            continue
    assert {"RL_REQUIRE_SERVICES", "RL_SHARED_DATA", "RL_MAX_IMPORT_BYTES"} <= named
    # RL_API_THROTTLE_RATES is the setting built from RL_API_WRITE_RATE / RL_API_EXPORT_RATE.
    undocumented = sorted(name for name in named - {"RL_API_THROTTLE_RATES"} if f"`{name}" not in readme)
    assert undocumented == []


def test_no_app_reads_the_environment():
    readers = sorted(str(path.relative_to(ROOT)) for path, text in _app_sources()
                     if re.search(r"os\.environ|os\.getenv", text))
    assert readers == []


def test_a_missing_torch_fails_a_run_that_requires_the_services(tmp_path):
    """RL_REQUIRE_SERVICES=1: torch or bert-score missing stops the run, as Chromium does, instead
    of skipping the tests that need them."""
    (tmp_path / "rl_hide_torch.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {**os.environ, "RL_REQUIRE_SERVICES": "1", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "rl_hide_torch", "-p", "no:cacheprovider", "--co", "-q",
         "tests/test_settings.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode != 0
    assert "RL_REQUIRE_SERVICES=1 but torch cannot be imported" in result.stdout + result.stderr


def _deploy_check(env_overrides: dict[str, str]) -> set[str]:
    env = _production_env({"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "RL_PSEUDONYM_SALT": secrets.token_urlsafe(40),
                           **env_overrides})
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    return set(re.findall(r"\((\w+\.\w\d+)\)", result.stdout + result.stderr))


def test_check_deploy_reports_only_what_the_readme_explains():
    readme = (ROOT / "README.md").read_text()
    explained = readme[readme.index("## Deployment checks"):].split("\n## ", 1)[0]
    fresh = _deploy_check({})
    assert fresh == {"security.W004", "security.W008"}
    with_hsts = _deploy_check({"DJANGO_SSL_REDIRECT": "1", "DJANGO_HSTS_SECONDS": "31536000"})
    assert with_hsts == {"security.W005", "security.W021"}
    for check in fresh | with_hsts:
        assert f"`{check}`" in explained, check
    assert _deploy_check({"DJANGO_SSL_REDIRECT": "1", "DJANGO_HSTS_SECONDS": "31536000",
                          "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "1", "DJANGO_HSTS_PRELOAD": "1"}) == set()


def test_each_xdist_worker_clears_a_redis_database_of_its_own():
    """scripts/test.sh runs the suite on several pytest-xdist workers; the tests clear their Redis
    database, so worker N takes the database N above the configured one."""
    from config.settings.test import xdist_redis_url

    assert xdist_redis_url("redis://127.0.0.1:6379/5", "gw0") == "redis://127.0.0.1:6379/5"
    assert xdist_redis_url("redis://127.0.0.1:6379/5", "gw2") == "redis://127.0.0.1:6379/7"
    assert xdist_redis_url("redis://:pw@127.0.0.1:6379", "gw1") == "redis://:pw@127.0.0.1:6379/1"
    # The test settings apply it before anything reads REDIS_URL, and hand it on to processes a test
    # starts (a real Celery worker).
    probe = (
        "import os, django; django.setup(); from django.conf import settings as s; "
        "print(s.REDIS_URL, s.CACHES['default']['LOCATION'], s.CELERY_BROKER_URL, s.CELERY_RESULT_BACKEND, "
        "os.environ['REDIS_URL'])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_") and k != "RL_TEST_REDIS_WORKER"}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.test", "PYTEST_XDIST_WORKER": "gw3",
                "REDIS_URL": "redis://127.0.0.1:6379/2"})

    def settings_of(env):
        return subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120, check=True).stdout.split()

    assert settings_of(env) == ["redis://127.0.0.1:6379/5"] * 5
    # A process started by that worker's test (it inherits the worker's environment) stays there.
    worker_env = {**env, "REDIS_URL": "redis://127.0.0.1:6379/5", "RL_TEST_REDIS_WORKER": "gw3"}
    assert settings_of(worker_env) == ["redis://127.0.0.1:6379/5"] * 5


@pytest.mark.django_db(transaction=True)
def test_the_sqlite_test_database_makes_a_second_writer_wait_as_a_deployments_does():
    """The SQLite half's test database is a file, as a deployment's: a connection that writes while
    another holds a write transaction waits for it (the timeout), where Django's default
    shared-cache memory database answered "database table is locked" at once (a batch's heartbeat
    beside its batch failed that way on a loaded machine)."""
    import threading
    import time

    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    if connection.vendor != "sqlite":
        pytest.skip("the SQLite test database's setting")
    User = get_user_model()
    first, second = User.objects.create(username="first"), User.objects.create(username="second")
    holding, errors = threading.Event(), []

    def hold_a_write():
        try:
            with transaction.atomic():
                User.objects.filter(pk=first.pk).update(first_name="held")
                holding.set()
                time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=hold_a_write)
    thread.start()
    assert holding.wait(10)
    User.objects.filter(pk=second.pk).update(first_name="waited")  # raised OperationalError in memory
    thread.join(10)
    assert errors == []
    assert sorted(User.objects.values_list("first_name", flat=True)) == ["held", "waited"]
