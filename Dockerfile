# rsjobs: one image for every role. The command picks it:
#   docker run IMAGE worker examples.demo_tasks:tasks     (or your own MODULE:REGISTRY)
#   docker run IMAGE reaper --lease-ms 30000
#   docker run IMAGE web --host 0.0.0.0
# Configuration through the environment: RSJOBS_URL, RSJOBS_NAMESPACE, RSJOBS_LOG_LEVEL,
# RSJOBS_LEASE_MS, RSJOBS_REAPER_INTERVAL_MS, RSJOBS_RETENTION_MS (see docs/reaper.md).
# Your handlers: build FROM this image and COPY your package into /app (the working
# directory is on the import path of `rsjobs worker`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# the package (with its Lua scripts as package data) and the example handlers
COPY pyproject.toml README.md ./
COPY rsjobs ./rsjobs
# the roles of a deployment: the web app, hooks and cron schedules (Redis runs apart)
RUN pip install ".[web,hooks,cron]" \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin rsjobs
COPY examples ./examples

USER 10001
ENV RSJOBS_DEMO_OUT=/tmp/rsjobs-demo

# every role: Redis answers from this container; the web role adds --http to its probe
# (see deploy/compose.yaml)
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["rsjobs", "healthcheck"]

ENTRYPOINT ["rsjobs"]
CMD ["--help"]
