# syntax=docker/dockerfile:1
# Arena: one image for every service (pick it with the command):
#   arena backend --host 0.0.0.0 --port 9000 --db /app/data/backend.sqlite3
#   arena launcher --host 0.0.0.0 --port 9111 --agent-url http://green:9006 -- arena-green --host 0.0.0.0 --port 9006 ...
#   arena-white --kind replay --host 0.0.0.0 --port 9004 --card-url http://white:9004
#   arena register ... / arena export ... / arena run ...
# No secret is baked in: API keys reach containers only as environment variables at run time (see .env.example).

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: install the project and its dependencies into a virtual environment ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/arena
WORKDIR /src
# Metadata first, then the packages: only a change of the sources re-runs the install.
COPY pyproject.toml README.md ./
COPY battle_backend ./battle_backend
COPY green_agent ./green_agent
COPY launcher ./launcher
COPY white_agent ./white_agent
RUN /opt/arena/bin/pip install . \
 && /opt/arena/bin/arena --help >/dev/null \
 && /opt/arena/bin/arena-green --help >/dev/null \
 && /opt/arena/bin/arena-white --help >/dev/null

# ---- runtime: the virtual environment, the scenarios, an unprivileged user ----
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/arena/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HOME=/home/arena
RUN groupadd --system --gid 10001 arena \
 && useradd --system --uid 10001 --gid arena --home-dir /home/arena --create-home --shell /usr/sbin/nologin arena \
 && mkdir -p /app/data /app/runs \
 && chown arena:arena /app/data /app/runs
COPY --from=build /opt/arena /opt/arena
WORKDIR /app
COPY scenarios ./scenarios
# numeric, so that runtimes which check for a non-root user without reading /etc/passwd (Kubernetes'
# runAsNonRoot) can tell: 10001 is the arena user and group created above
USER 10001:10001
# backend, white agent, green agent, green launcher, white launcher (the AgentBeats conventions)
EXPOSE 9000 9004 9006 9111 9210
CMD ["arena", "--help"]
