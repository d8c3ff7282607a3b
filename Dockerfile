# BirdDog: one image for `birddog migrate`, `birddog run` and `birddog worker`.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY src ./src
COPY migrations ./migrations
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --system --home /app birddog
USER birddog
ENV BIRDDOG_LOG_FORMAT=json BIRDDOG_METRICS_HOST=0.0.0.0
CMD ["birddog", "run"]
