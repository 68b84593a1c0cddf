# The operator's image: the triton_operator package on a slim Python, run as a non-root user.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir . && rm -rf /src

USER 65532:65532
WORKDIR /
ENTRYPOINT ["triton-operator"]
