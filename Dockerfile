# syntax=docker/dockerfile:1
# One image for every memstrata role (api, workers, Beat, Flower, migrate, metrics, the
# embedded milvus-lite server): the package and its server extras installed (not editable)
# into /venv in a build stage, copied into a slim runtime stage that runs as a non-root user.
#
#   docker build -t memstrata:0.1.0 .
#
# The base is pinned to an exact tag; pin its digest too where images are built
# (`docker buildx imagetools inspect python:3.11.11-slim-bookworm`, then
# --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest>).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG MEMSTRATA_EXTRAS="[server,es]"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# memstrata/ holds symlinks to core, tasks, ops and beat_schedule.py: copy all of them
COPY pyproject.toml README.md beat_schedule.py ./
COPY memstrata ./memstrata
COPY core ./core
COPY tasks ./tasks
COPY ops ./ops
# an extra this version does not declare only warns; the base package is installed either way
RUN python -m venv /venv \
 && /venv/bin/pip install --upgrade pip \
 && /venv/bin/pip install ".${MEMSTRATA_EXTRAS}" \
 && /venv/bin/memstrata --help > /dev/null

FROM ${PYTHON_IMAGE}
# libgomp1: OpenMP runtime of the bundled milvus-lite server and the embedders' numpy stack
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 memstrata \
 && useradd --system --uid 10001 --gid memstrata --home-dir /app --shell /usr/sbin/nologin memstrata \
 && mkdir -p /app/var /data/transcripts /data/milvus \
 && chown -R memstrata:memstrata /app /data
COPY --from=build /venv /venv
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MEMSTRATA_TRANSCRIPT_DIR=/data/transcripts
WORKDIR /app
USER memstrata:memstrata
# api, Flower, metrics exporters, the embedded milvus-lite server
EXPOSE 8000 5555 9464 9100 19530
ENTRYPOINT ["memstrata"]
CMD ["--help"]
