# NodeHeal exporter image (deploy/exporter). Build from the repository root:
#   docker build -t nodeheal-exporter:0.1.0 .
# Multi-stage: dependencies are installed into a virtualenv in the builder and only that virtualenv
# and the nodeheal package reach the runtime image, which runs as a non-root user and works with a
# read-only root filesystem (no bytecode is written at run time).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY deploy/exporter/requirements.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install --require-virtualenv -r /tmp/requirements.txt
COPY nodeheal /app/nodeheal
# Compile once at build time: the runtime filesystem is read-only.
RUN /opt/venv/bin/python -m compileall -q /app/nodeheal /opt/venv/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="nodeheal-exporter" \
      org.opencontainers.image.description="Node condition transitions to Amazon EventBridge"
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 is the conventional "nonroot" uid; the Deployment also sets runAsNonRoot/runAsUser.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["python", "-m", "nodeheal.exporter"]
