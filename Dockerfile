# The shadow-eval images: every component (capture front end and sidecar, replay and compare
# workers, API, dashboard, mock model server) is one `shadow-eval` subcommand. Two targets
# follow the package's extras (docs/deploy.md, "Images and extras"):
#   docker build --target capture -t shadow-eval-capture:0.1.0 .   # the live path, light
#   docker build --target full -t shadow-eval:0.1.0 .              # everything ([all])
# `capture` is `pip install shadow-eval` (no extra): `capture serve`, `capture envoy`,
# `replay run`, `mock-llm` and `db`, without torch, sentence-transformers, onnx, streamlit,
# statsmodels or pandas; `full` adds the CPU build of PyTorch and `.[all]`.
# tests/deploy/test_compose.py checks this file against the repository (pinned base image,
# every package the wheel ships is copied into both targets, the entrypoint exists, a
# non-root user, and every volume mount point of docker-compose.yml exists in the image,
# owned by that user: Docker would create a missing one owned by root).
FROM python:3.11.13-slim-bookworm AS runtime

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

RUN useradd --create-home --uid 10001 shadoweval \
    && mkdir -p /var/lib/shadow-eval/spool /var/lib/shadow-eval/split /var/lib/shadow-eval/capture-log \
        /home/shadoweval/.cache \
    && chown -R shadoweval /var/lib/shadow-eval /home/shadoweval/.cache
WORKDIR /app

# The source tree, copied once for both targets. shadoweval/ links the stage folders at the
# repository's top (shadoweval/stats -> ../stats): COPY keeps the links, so their targets
# are copied beside it.
FROM runtime AS source
COPY pyproject.toml README.md ./
COPY shadoweval ./shadoweval
COPY capture ./capture
COPY replay ./replay
COPY compare ./compare
COPY stats ./stats
COPY dashboard ./dashboard
COPY migrations ./migrations
COPY deploy ./deploy

# The live path: the base install only (tens of MB of dependencies, no evaluator).
FROM source AS capture
RUN pip install .
USER 10001
EXPOSE 8080 8081 9464 9470
ENTRYPOINT ["shadow-eval"]
CMD ["--help"]

# Everything: compare and gate, the API, the dashboard, the canary controller.
FROM runtime AS full
# The CPU build of PyTorch (the Makefile's TORCH_SPEC); the default index would pull CUDA.
# Installed before the source is copied, so a code change does not download it again.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY --from=source /app /app
RUN pip install ".[all]"
USER 10001
EXPOSE 8080 8081 8787 8501 9464 9470 9471
ENTRYPOINT ["shadow-eval"]
CMD ["--help"]
