"""Container probe for the web service: GET /api/v1/health on this container and
require the named parts to answer "ok" (all five when none is named).

    python scripts/healthcheck.py mysql redis broker
"""
import json
import os
import sys
import urllib.error
import urllib.request


def main(parts: list[str]) -> int:
    host = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost").split(",")[0].strip() or "localhost"
    listen = os.environ.get("SECKILL_WEB_LISTEN") or os.environ.get("GUNICORN_BIND") or "127.0.0.1:8000"
    port = listen.rsplit(":", 1)[-1]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/health", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=4) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:  # 503 still carries the figures
        body = json.load(exc)
    except (OSError, ValueError) as exc:
        print(f"health: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body))
    wanted = parts or ["mysql", "redis", "broker", "worker", "beat"]
    return 0 if all(body.get(p) == "ok" for p in wanted) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
