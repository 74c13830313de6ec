"""The Python a serving replica runs in: its prediction image's libraries and nothing else.

Every serving replica of a prebuilt image is started with the interpreter :func:`serving_python`
returns: an environment made from the image's profile (:attr:`PredictionImage.profile
<kfp_spot.executors.PredictionImage.profile>`: scikit-learn, NumPy, SciPy, joblib, threadpoolctl;
the XGBoost images add xgboost) by :func:`kfp_spot.envcache.package_env`, the way a package job's
environment is made from its training image's. So a model file that needs a library the image
lacks fails to load here as it would on Vertex AI. The prediction server itself
(``kfp_spot/emulator/serving/predictor.py``) is a standalone file that imports nothing of kfp-spot.
"""

from __future__ import annotations

import os
from pathlib import Path

from kfp_spot import envcache
from kfp_spot.executors import PredictionImage


def serving_python(image: PredictionImage, cache_dir: str | os.PathLike[str]) -> Path:
    """The python executable of an environment holding what ``image`` holds.

    Made once per image and host environment (safe across processes), then reused.

    Args:
        image: the prebuilt prediction image the replica stands in for.
        cache_dir: where environments are cached.

    Raises:
        kfp_spot.envcache.PackageInstallError: the environment could not be made.
        ValueError: the emulator does not serve ``image`` (it has no library profile).
    """
    if not image.served_locally:
        raise ValueError(f"the local emulator does not serve {image.name}: no library profile")
    # xgboost installed here as xgboost-cpu counts too (envcache.SAME_MODULE)
    return envcache.package_env([], cache_dir, profile=image.profile)
