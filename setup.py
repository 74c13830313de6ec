"""Package discovery for the mapped folders (everything else is in pyproject.toml)."""

from setuptools import find_packages, setup


def _mapped(folder: str, namespace: str) -> list[str]:
    return [namespace] + [f"{namespace}.{p}" for p in find_packages(folder)]


setup(
    # kfp_spot/data holds the CSV tables (no __init__.py): named, so setuptools ships it as data.
    packages=[
        *find_packages(include=["kfp_spot", "kfp_spot.*"]),
        "kfp_spot.data",
        *_mapped("components", "kfp_spot.components"),
        *_mapped("pipelines", "kfp_spot.pipelines"),
        # the example trainer's project (not a package: its pyproject.toml is data) and package
        "kfp_spot.examples.trainer",
        "kfp_spot.examples.trainer.trainer",
    ]
)
