# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc pkg-config libmariadb-dev mariadb-client gettext \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# collectstatic needs the production settings to load; these values exist only
# for this build step and are no secrets of any deployment.
RUN DJANGO_SECRET_KEY=collectstatic-only-build-step-value-not-a-secret-0123456789abcdef \
    SECKILL_TASK_SIGNING_KEY=collectstatic-only-build-step-signing-value-0123456789 \
    DATABASE_URL=mysql://build:build@build:3306/build REDIS_URL=redis://build:6379/0 \
    CELERY_BROKER_URL=amqp://build:build@build:5672// \
    SECKILL_PAYMENT_WEBHOOK_SECRET=collectstatic-only-build-step-webhook-value-0123 \
    DJANGO_SETTINGS_MODULE=seckill_site.settings.production \
    python manage.py collectstatic --noinput
RUN useradd --system --uid 10001 seckill && chown -R seckill /app
USER seckill
EXPOSE 8000
# granian through the project's launcher (seckill_site/serve.py); the contract's
# `gunicorn seckill_site.wsgi:application` works in this image too.
CMD ["python", "-m", "seckill_site.serve"]
