# decklog — `docker build -t decklog . && docker run -p 8080:8080 -v decklog-data:/data --env-file .env decklog`
# (.env holds SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET). Socket Mode: `docker run … decklog --socket-mode` with
# SLACK_BOT_TOKEN and SLACK_APP_TOKEN (no inbound port needed).
# Without Slack credentials decklog would serve the sandbox, whose page lets anyone act as any person: on this
# image's DECKLOG_HOST=0.0.0.0 it refuses to start unless DECKLOG_SANDBOX_PUBLIC=1 is set on purpose.

# -- build: the wheels of decklog and of every dependency (nothing editable, no compilers in the final image) --
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY core ./core
COPY adapters ./adapters
COPY bot ./bot
COPY prompts ./prompts
RUN pip wheel --wheel-dir /wheels .

# -- run: decklog installed from those wheels, as a non-root user --------------------------------------------
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DECKLOG_DATA_DIR=/data \
    DECKLOG_HOST=0.0.0.0 \
    DECKLOG_PORT=8080

COPY --from=build /wheels /wheels
# A regular (non-editable) install: the example config, prompts and sandbox files are package data.
RUN pip install --no-index --find-links /wheels decklog \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home --home-dir /data decklog \
    && mkdir -p /data && chown decklog:decklog /data

USER decklog
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=15s --retries=3 \
    CMD python -c "import os, sys, urllib.request; u = f'http://127.0.0.1:{os.environ.get(\"DECKLOG_PORT\", \"8080\")}/healthz'; sys.exit(0 if urllib.request.urlopen(u, timeout=2).status == 200 else 1)"
ENTRYPOINT ["decklog", "serve"]
