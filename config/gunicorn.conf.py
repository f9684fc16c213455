"""gunicorn's settings, in one place: the README's deploy command, the Dockerfile and
docker-compose.yml all run ``gunicorn -c config/gunicorn.conf.py config.wsgi:application``.

Each can be changed from the environment (``GUNICORN_*`` below); gunicorn's own command-line
options and ``GUNICORN_CMD_ARGS`` override this file. What was measured, and why these values:
``benchmarks/questionnaire/README.md`` ("Server options").
"""
import os


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Processes: one more than the cores covers the time a request waits on the database.
workers = _int("GUNICORN_WORKERS", (os.cpu_count() or 1) + 1)
# Threads per process: with more than one, gunicorn runs its gthread worker, which keeps a client's
# connection open between requests (keepalive) and lets a process go on with another request while
# one waits on the database. Each thread holds its own persistent database connection.
threads = _int("GUNICORN_THREADS", 1)
worker_class = "gthread" if threads > 1 else "sync"
# Seconds an idle client connection stays open for its next request (gthread only; the sync
# worker closes every connection). A reverse proxy that reuses its upstream connections saves a
# TCP handshake per request.
keepalive = _int("GUNICORN_KEEPALIVE", 5)
# A launch sends hundreds of connections within seconds: let the kernel queue them.
backlog = _int("GUNICORN_BACKLOG", 2048)
timeout = _int("GUNICORN_TIMEOUT", 60)
graceful_timeout = 30
# Recycle a process now and then (memory a library may leak), staggered so they never all restart at once.
max_requests = _int("GUNICORN_MAX_REQUESTS", 20000)
max_requests_jitter = max_requests // 10
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None  # "-" logs every request to stdout
# The path without its query string, and no referrer: a worker's entry address carries their
# platform ids (PROLIFIC_PID, SESSION_ID, workerId), and so does the referrer of the page it leads
# to; a log keeps them where a participant's withdrawal can never erase them (gunicorn's default
# logs the request line, "%(r)s", and the referrer, "%(f)s").
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s" %(M)sms'

loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")
