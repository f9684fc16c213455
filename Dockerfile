# One image for web, workers and beat. Build the LM worker image with --build-arg EXTRAS=lm.
FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
# Every package pyproject.toml installs (tests/test_deployment.py checks the list), and the templates.
COPY config ./config
COPY lab ./lab
COPY studies ./studies
COPY annotations ./annotations
COPY scoring ./scoring
COPY cockpit ./cockpit
COPY templates ./templates
COPY manage.py ./
RUN if [ -n "$EXTRAS" ]; then pip install ".[${EXTRAS}]"; else pip install .; fi \
    && DJANGO_SECRET_KEY=build-only-build-only-build-only-xx RL_PSEUDONYM_SALT=build-only-build-only-build-only-xx \
       DJANGO_SETTINGS_MODULE=config.settings.production python manage.py collectstatic --noinput \
    && useradd --create-home app && mkdir -p /app/var && chown -R app /app/var
USER app
EXPOSE 8000
# gunicorn's settings: config/gunicorn.conf.py (GUNICORN_WORKERS, GUNICORN_THREADS, ... override them).
ENV GUNICORN_BIND=0.0.0.0:8000
CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"]
