# The runtime image every kfp-spot component runs in: kfp_spot.RUNTIME_IMAGE, i.e.
# ghcr.io/kfp-spot/python-runtime:<version> (docs/image.md). linux/amd64 (what Vertex AI runs),
# Python 3.11, and kfp-spot with exactly the packages requirements-image.lock pins in a venv at
# /opt/kfp-spot whose bin/ is first on PATH, so the components' `python3` is the venv's.
#
# Build it with `make image` (podman or docker). The build context is build/image/, not the
# checkout: `kfp-spot image build` first puts every wheel there (wheels/: the lock's packages,
# downloaded for linux/x86_64 and CPython 3.11 whatever the host is, and the lock itself as
# requirements.txt; dist/: kfp-spot), so pip inside the build needs no index. By hand:
#   kfp-spot image build        # or, once build/image/ exists:
#   docker build --platform linux/amd64 -f Dockerfile --target runtime -t IMAGE build/image
# BASE_IMAGE: any image with Python 3.11 and its venv module as python3, in its linux/amd64
# variant (`make image` with podman uses a Debian bookworm root made by debootstrap; docker pulls
# python:3.11-slim).
ARG BASE_IMAGE=python:3.11-slim
# What the examples stage adds to: this file's runtime stage, or (what `kfp-spot image build`
# passes) the runtime image it has just built, so the examples image is exactly its layers plus
# one whatever the engine's layer cache does.
ARG EXAMPLES_BASE=runtime

# The dependencies, in a stage of their own: reused until they change, and the wheels they come
# from never reach the final image. requirements.txt pins every package (the lock): pip installs
# exactly those wheels (--no-deps), and `pip check` below fails if the lock misses a dependency.
FROM ${BASE_IMAGE} AS deps
COPY wheels/ /wheels/
RUN python3 -m venv /opt/kfp-spot \
    && /opt/kfp-spot/bin/python -m pip install --no-index --no-cache-dir \
        --disable-pip-version-check --no-deps --find-links /wheels -r /wheels/requirements.txt

FROM ${BASE_IMAGE} AS runtime
ENV VIRTUAL_ENV=/opt/kfp-spot PATH=/opt/kfp-spot/bin:$PATH PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=deps /opt/kfp-spot /opt/kfp-spot
COPY dist/ /tmp/dist/
RUN pip install --no-index --no-deps /tmp/dist/kfp_spot-*.whl \
    && rm -rf /tmp/dist \
    && pip check \
    && python3 -c "import kfp, kfp_spot; print('kfp-spot', kfp_spot.__version__, 'kfp', kfp.__version__)"
LABEL org.opencontainers.image.title="kfp-spot" \
      org.opencontainers.image.description="Python 3.11, kfp and kfp-spot (requirements-image.lock): the image kfp-spot components run in" \
      org.opencontainers.image.licenses="Apache-2.0"
CMD ["python3", "-c", "import kfp_spot; print(kfp_spot.RUNTIME_IMAGE)"]

# The runtime image plus the example trainer's dependencies (kfp-spot's `examples` extra), for
# evaluating the example trainer offline (the container test). Never published.
FROM ${EXAMPLES_BASE} AS examples
RUN --mount=type=bind,source=wheels,target=/wheels \
    pip install --no-index --find-links /wheels -r /wheels/examples.txt
