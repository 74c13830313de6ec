"""The Python a serving replica runs in: the prediction image's libraries (one seam).

Every serving replica of a prebuilt image is started with the interpreter :func:`serving_python`
returns, so how a serving environment is made is decided here alone. Today it is the shared
package environment of :mod:`kfp_spot.envcache` with no packages installed (it sees this host's
site-packages, which hold the image's frameworks: scikit-learn, numpy, scipy, joblib, and XGBoost
when installed). The prediction server itself is a standalone file that imports nothing of
kfp-spot, so the replica depends only on the image's libraries.
"""

from __future__ import annotations

import os
from pathlib import Path

from kfp_spot import envcache
from kfp_spot.serving.images import PredictionImage


def serving_python(image: PredictionImage, cache_dir: str | os.PathLike[str]) -> Path:
    """The python executable of an environment holding what ``image`` holds.

    Args:
        image: the prebuilt prediction image the replica stands in for.
        cache_dir: where environments are cached.

    Raises:
        kfp_spot.envcache.PackageInstallError: the environment could not be made.
    """
    del image  # one host-view environment serves every image until image profiles exist
    return envcache.package_env([], cache_dir)
