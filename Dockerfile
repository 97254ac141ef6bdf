# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc pkg-config libmariadb-dev mariadb-client \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN DJANGO_SECRET_KEY=collectstatic-only-not-a-real-secret-0123456789 \
    DJANGO_SETTINGS_MODULE=seckill_site.settings.production \
    python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["gunicorn", "seckill_site.wsgi:application"]
