# One image for web, worker and beat (docker-compose.yml picks the command), in
# two stages: the first compiles what needs a compiler (mysqlclient against the
# MariaDB headers) into a virtualenv; the second gets that virtualenv and the
# runtime library only, no gcc, no headers, no test or lint tools
# (requirements-dev.txt never enters the image).
#
# The base image by digest, so a rebuild gets the same bytes until the digest
# here is changed on purpose. The digest is one the python:3.11-slim-bookworm
# tag was published with (taken from public build files that pin it; not pulled
# from here, where no Docker engine runs). To move to the tag's current build
# (a security update of Debian or Python): run
#   docker buildx imagetools inspect python:3.11-slim-bookworm
# and put the "Digest:" it prints (the multi-platform index) in place of this one.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc pkg-config libmariadb-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
COPY requirements.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install -r /tmp/requirements.txt

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
# libmariadb3: the client library mysqlclient was built against (its headers
# stayed in the build stage).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libmariadb3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The code belongs to root and the app user can only read it: a process that
# is made to write a file cannot change what runs next time. var/ (the web
# server's metrics files, var/prometheus/) is the one directory it writes.
COPY . .
# collectstatic needs the production settings to load; these values exist only
# for this build step and are no secrets of any deployment.
RUN DJANGO_SECRET_KEY=collectstatic-only-build-step-value-not-a-secret-0123456789abcdef \
    SECKILL_TASK_SIGNING_KEY=collectstatic-only-build-step-signing-value-0123456789 \
    DATABASE_URL=mysql://build:build@build:3306/build REDIS_URL=redis://build:6379/0 \
    CELERY_BROKER_URL=amqp://build:build@build:5672// \
    SECKILL_PAYMENT_WEBHOOK_SECRET=collectstatic-only-build-step-webhook-value-0123 \
    DJANGO_SETTINGS_MODULE=seckill_site.settings.production \
    python manage.py collectstatic --noinput \
 && python -m compileall -q /app \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin seckill \
 && chown -R root:root /app && chmod -R a-w,a+rX /app \
 && mkdir -p /app/var && chown seckill /app/var && chmod 0750 /app/var
USER seckill
EXPOSE 8000
# granian through the project's launcher (seckill_site/serve.py); the contract's
# `gunicorn seckill_site.wsgi:application` works in this image too.
CMD ["python", "-m", "seckill_site.serve"]
