# halluscope serve in a container: non-root, configured from environment variables, model chosen at run time.
#
#   docker build -t halluscope .                                   # server extra only (remote models)
#   docker build -t halluscope --build-arg EXTRAS=server,embedded .  # + the offline embedded model
#   docker run -p 8080:8080 -v halluscope-data:/data \
#     -e HALLUSCOPE_SERVER_TOKEN=change-me \
#     -e HALLUSCOPE_MODEL=gpt-4o-mini -e HALLUSCOPE_BASE_URL=https://api.openai.com/v1 -e HALLUSCOPE_API_KEY=sk-... \
#     halluscope
#
# A bind-mounted /data must be writable by uid 10001 (`sudo chown -R 10001 ./data`), or run the container as the
# folder's owner (`docker run --user "$(id -u):$(id -g)" -v "$PWD/data:/data" ...`); `serve` says so at start.
# The HEALTHCHECK follows the port `serve` was given (`--port` on the command line, else HALLUSCOPE_SERVER_PORT).
#
# Every `halluscope serve` flag has a variable (HALLUSCOPE_SERVER_<FLAG>, e.g. HALLUSCOPE_SERVER_MAX_IN_FLIGHT);
# see docs/container.md. The service listens on 0.0.0.0 in the container, so it refuses to start without
# HALLUSCOPE_SERVER_TOKEN.

# Pinned by version tag and digest (a rebuild gets the same base); refresh both together, e.g. from
# `docker buildx imagetools inspect python:3.11.10-slim-bookworm` (docs/container.md).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

# --- build: wheels for halluscope and its dependencies (compilers only here, for llama-cpp-python) ---------
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=server
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[${EXTRAS}]"

# --- runtime ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG EXTRAS=server
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    XDG_CACHE_HOME=/data/cache \
    HALLUSCOPE_SERVER_HOST=0.0.0.0 \
    HALLUSCOPE_SERVER_PORT=8080 \
    HALLUSCOPE_SERVER_JOBS_DB=/data/jobs.sqlite \
    HALLUSCOPE_SERVER_LOG_FORMAT=json
COPY --from=build /wheels /wheels
# libgomp1: the OpenMP runtime a llama.cpp build (the embedded extra) links against; the slim image lacks it
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir --no-index --find-links /wheels "halluscope[${EXTRAS}]" \
 && rm -rf /wheels \
 && useradd --create-home --uid 10001 --shell /usr/sbin/nologin halluscope \
 && mkdir -p /data/cache \
 && chown -R halluscope:halluscope /data
USER halluscope
WORKDIR /home/halluscope
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "halluscope.server.healthcheck"]
CMD ["halluscope", "serve"]
