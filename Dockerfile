# The shadow-eval image: every component (capture front end and sidecar, replay and compare
# workers, API, dashboard, mock model server) is one `shadow-eval` subcommand.
#   docker build -t shadow-eval:0.1.0 .
# tests/deploy/test_compose.py checks this file against the repository (pinned base image,
# every package the wheel ships is copied, the entrypoint exists, a non-root user, and
# every volume mount point of docker-compose.yml exists in the image, owned by that user:
# Docker would create a missing one owned by root).
FROM python:3.11.13-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

# The CPU build of PyTorch (the Makefile's TORCH_SPEC); the default index would pull CUDA.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

WORKDIR /app
COPY pyproject.toml README.md ./
# shadoweval/ links the stage folders at the repository's top (shadoweval/stats -> ../stats):
# COPY keeps the links, so their targets are copied beside it.
COPY shadoweval ./shadoweval
COPY capture ./capture
COPY replay ./replay
COPY compare ./compare
COPY stats ./stats
COPY dashboard ./dashboard
COPY migrations ./migrations
COPY deploy ./deploy
RUN pip install . \
    && useradd --create-home --uid 10001 shadoweval \
    && mkdir -p /var/lib/shadow-eval/spool /var/lib/shadow-eval/split /var/lib/shadow-eval/capture-log \
        /home/shadoweval/.cache \
    && chown -R shadoweval /var/lib/shadow-eval /home/shadoweval/.cache

USER 10001
EXPOSE 8080 8081 8787 8501 9464 9470 9471
ENTRYPOINT ["shadow-eval"]
CMD ["--help"]
