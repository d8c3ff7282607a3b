# BirdDog: one image for `birddog migrate`, `birddog run` and `birddog worker`.
# Runtime dependencies only: no embedded PostgreSQL (set DATABASE_URL) and no test tools.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY src ./src
COPY migrations ./migrations
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --system --home /app birddog
USER birddog
# /metrics and /healthz listen on every interface of the container's own network only:
# nothing is reachable from outside unless a port is published (compose publishes it on
# the host's 127.0.0.1). The health check asks /healthz from inside the container.
ENV BIRDDOG_LOG_FORMAT=json BIRDDOG_METRICS_HOST=0.0.0.0 BIRDDOG_WORKER_METRICS_HOST=0.0.0.0
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["birddog", "health"]
CMD ["birddog", "run"]
