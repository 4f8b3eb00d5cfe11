# decklog — `docker build -t decklog . && docker run -p 8080:8080 -v decklog-data:/data --env-file .env decklog`
# Socket Mode: `docker run … decklog --socket-mode` (no inbound port needed).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DECKLOG_DATA_DIR=/data \
    DECKLOG_HOST=0.0.0.0 \
    DECKLOG_PORT=8080

WORKDIR /app
# Dependencies first, so that code changes do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir core adapters bot && touch core/__init__.py adapters/__init__.py bot/__init__.py \
    && pip install . && pip uninstall -y decklog
COPY core ./core
COPY adapters ./adapters
COPY bot ./bot
COPY prompts ./prompts
COPY decklog.example.toml manifest.yml ./
# Editable install: the shipped decklog.example.toml and prompts/ are found next to the packages.
RUN pip install --no-deps -e . \
    && useradd --system --uid 10001 --no-create-home --home-dir /data decklog \
    && mkdir -p /data && chown decklog:decklog /data

USER decklog
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=15s --retries=3 \
    CMD python -c "import os, sys, urllib.request; u = f'http://127.0.0.1:{os.environ.get(\"DECKLOG_PORT\", \"8080\")}/healthz'; sys.exit(0 if urllib.request.urlopen(u, timeout=2).status == 200 else 1)"
ENTRYPOINT ["decklog", "serve"]
