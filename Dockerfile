# syntax=docker/dockerfile:1
# The runtime image every kfp-spot component names as base_image: a Python base plus this package.
# Tag: kfp_spot.RUNTIME_IMAGE (<repository>:<package version>); `make image` builds it. Building and
# pushing it for Vertex AI, and recompiling with another image: docs/registry.md.

ARG PYTHON_IMAGE=python:3.11-slim

# Build a wheel from the build context, so the final image holds no sources or build tools.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# Optional extras of the package, e.g. --build-arg EXTRAS=examples for the example trainer's deps.
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# kfp (the components' executor) and the Google Cloud clients come in as the package's dependencies.
COPY --from=build /wheels /tmp/wheels
RUN wheel="$(ls /tmp/wheels/kfp_spot-*.whl)" \
    && pip install "${wheel}${EXTRAS:+[${EXTRAS}]}" \
    && rm -rf /tmp/wheels \
    && python -c "import kfp, kfp_spot; print('kfp-spot', kfp_spot.__version__, 'kfp', kfp.__version__)"
LABEL org.opencontainers.image.title="kfp-spot runtime" \
      org.opencontainers.image.description="Python 3.11 + kfp-spot: the image kfp-spot components run in"
CMD ["python", "-c", "import kfp_spot; print(kfp_spot.RUNTIME_IMAGE)"]
