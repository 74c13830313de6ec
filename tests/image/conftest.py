"""The container tests need the runtime image: these fixtures build it, or reuse it when nothing it
is made of changed (seconds), and fail loudly when no container engine can run it.

`make test` installs podman (Debian) and builds the images before pytest, so on CI these fixtures
only confirm they are current. A missing engine is a failure, never a skip: a skipped container
test would let a broken image or command through unnoticed.

Under pytest-xdist the first worker that needs the images builds (or confirms) them under a file
lock, since the build writes into the checkout's ``build/image``; the others read its answer, and
every worker shares one scratch config directory, so the build's record is everyone's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfp_spot import image
from tests.shared import once_per_run, run_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[image.Engine]:
    """The container engine, with this project's podman settings unless the caller chose others."""
    saved = {k: os.environ.get(k) for k in ("CONTAINERS_CONF", "KFP_SPOT_CONFIG_DIR")}
    os.environ.setdefault("CONTAINERS_CONF", str(REPO / "tools" / "containers.conf"))
    # What the build records goes to a scratch config, not the user's.
    os.environ["KFP_SPOT_CONFIG_DIR"] = str(run_dir(tmp_path_factory, "image-config"))
    try:
        try:
            yield image.detect_engine()
        except image.ImageBuildError as exc:
            pytest.fail(f"the container tests need podman or docker: {exc}", pytrace=False)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def images(engine: image.Engine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The runtime and examples images of this checkout (reference -> image ID)."""

    def build(_directory: Path) -> dict[str, str]:
        result = image.build_image(REPO, engine=engine, examples=True, progress=print)
        return result.images

    try:
        built: dict[str, str] = once_per_run(tmp_path_factory, "images", build)
    except image.ImageBuildError as exc:
        pytest.fail(f"cannot build the runtime image (`make test-images`): {exc}", pytrace=False)
    return built
