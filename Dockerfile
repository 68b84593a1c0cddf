# The operator's image: the triton_operator wheel on a slim Python, run as a non-root numeric user.
# Build and push (see the README): docker build -t REGISTRY/triton-operator:TAG . && docker push REGISTRY/triton-operator:TAG

# Stage 1: build the wheel from the source tree (setuptools only lives here).
FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels .

# Stage 2: the wheel and its dependencies, nothing else.
FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="triton-operator" \
      org.opencontainers.image.description="Kubernetes operator for NVIDIA Triton Inference Server fleets" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels

# The chart's securityContext runs the same numeric user with a read-only root filesystem.
USER 65532:65532
WORKDIR /
# The chart adds the scope as arguments: --all-namespaces, or --namespace NS per watched namespace.
ENTRYPOINT ["triton-operator", "run"]
