"""``prepare_package`` as tests call it where building is not what they check: through the run's
build cache (``build_cache_dir``, as the component passes it), so a source already built in this
run is not built again.

A build that failed is never cached, and the cache is keyed by the source tree's content and the
build tools, so a test gets what a fresh build gives. What the build itself does (byte-reproducible
archives, a rebuild on a changed source, the cache) is tested with the library's own
``prepare_package`` (tests/packaging/test_prepare_package.py, test_build_cache.py).
"""

from __future__ import annotations

import os
from typing import Any

from kfp_spot.packaging import PackageInfo
from kfp_spot.packaging import prepare_package as build_and_stage


def prepare_package(*args: Any, **kwargs: Any) -> PackageInfo:
    """:func:`kfp_spot.packaging.prepare_package` with the run's build cache unless one is given."""
    kwargs.setdefault("build_cache_dir", os.environ["KFP_SPOT_CACHE_DIR"])
    return build_and_stage(*args, **kwargs)
