# Shoal's image: one image for the control plane (`shoal serve`), its migrations (`shoal db
# upgrade`), the admin commands and workers (`shoal worker`). docs/guides/deploy.md tells how to run it.
#
#   docker build -t shoal .                                  # control plane (and API-only workers)
#   docker build -t shoal-worker --build-arg WITH_CLIS=1 .   # + Claude Code, Gemini CLI, Codex
#
# Stages: `builder` builds Shoal's wheel and installs it with its runtime dependencies (pinned
# by requirements.lock) into a virtual environment; `clis` installs the pinned AI CLIs with npm
# (only built when WITH_CLIS=1, under BuildKit); the last stage is a slim runtime that runs as
# the unprivileged user `shoal` (uid 10001).

# 0: no AI CLIs (the default); 1: the AI CLIs of `make clis`, with Node.js to run them.
ARG WITH_CLIS=0
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: the wheel and a virtual environment with the runtime dependencies ----------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /build
RUN python -m venv /opt/shoal
# Dependencies first, in their own layer: a change of Shoal's source does not reinstall them.
# The runtime dependencies are pyproject.toml's, at requirements.lock's versions (the lock also
# pins the development tools, which the image does not need).
COPY pyproject.toml requirements.lock ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > runtime.txt \
    && /opt/shoal/bin/pip install --constraint requirements.lock --requirement runtime.txt
COPY README.md ./
COPY src ./src
RUN /opt/shoal/bin/pip wheel --no-deps --wheel-dir /build/dist . \
    && /opt/shoal/bin/pip install --no-deps /build/dist/shoal-*.whl

# ---- clis: the AI CLIs, pinned as in the Makefile's CLI_PACKAGES (`make clis`) -----------------
FROM node:20-bookworm-slim AS clis
ARG CLI_PACKAGES="@anthropic-ai/claude-code@2.1.197 @google/gemini-cli@0.61.0 @openai/codex@0.169.0"
RUN mkdir -p /opt/clis/bin \
    && npm install --prefix /opt/clis --no-audit --no-fund --loglevel=error ${CLI_PACKAGES} \
    && cp /usr/local/bin/node /opt/clis/bin/node \
    && npm cache clean --force

# ---- base: the slim runtime ---------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS base
# Pango and a font: WeasyPrint renders reports as PDF with them. tar: the backup procedure.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libpango-1.0-0 libpangoft2-1.0-0 \
        fonts-dejavu-core tar \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 shoal \
    && useradd --system --uid 10001 --gid shoal --home-dir /home/shoal --create-home \
        --shell /usr/sbin/nologin shoal \
    && mkdir -p /data && chown shoal:shoal /data
COPY --from=builder /opt/shoal /opt/shoal
ENV PATH=/opt/shoal/bin:/opt/clis/node_modules/.bin:/opt/clis/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SHOAL_DATA_DIR=/data

FROM base AS with-clis-0

FROM base AS with-clis-1
COPY --from=clis /opt/clis /opt/clis

# ---- runtime ------------------------------------------------------------------------------------
FROM with-clis-${WITH_CLIS} AS runtime
LABEL org.opencontainers.image.title="Shoal" \
      org.opencontainers.image.description="Shoal control plane and worker" \
      org.opencontainers.image.licenses="Apache-2.0"
USER shoal
WORKDIR /home/shoal
# /data (SHOAL_DATA_DIR): a control plane's artifact store and server-wide workflows, a worker's
# outbox and workspaces; mount a volume there (compose.yaml does) to keep them.
EXPOSE 8000
# A control plane is healthy when `/readyz` answers 200 (store, bus and runtime up; at least
# SHOAL_READY_WORKERS workers connected). A worker's container has no HTTP port: compose turns
# this check off for workers.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request\ntry:\n    sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4).status == 200 else 1)\nexcept Exception:\n    sys.exit(1)"]
ENTRYPOINT ["shoal"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
