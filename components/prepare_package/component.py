"""KFP interface of ``prepare_package``: the runtime is :mod:`kfp_spot.packaging`."""

from typing import NamedTuple

from kfp.dsl import Artifact, Output

from kfp_spot.components.factory import component


@component
def prepare_package(
    source: str,
    package: Output[Artifact],
    staging_uri: str = "",
    python_module: str = "",
    build_wheel: bool = False,
    extra_package_uris: list = [],
    check_import: bool = False,
    requirements: list = [],
) -> NamedTuple("Outputs", [("package_uris", list[str])]):
    """Builds training code into a reproducible sdist named by its sha256 and stages it.

    The same source always gives the same bytes, staged at ``<staging>/<name>/<sha256>/<file>``;
    a package already staged is not uploaded again (metadata ``cache_hit``). Before anything is
    staged, the module the job runs must be in the built package and compile; optionally it must
    import in a fresh environment.

    Args:
        source: a project directory (pyproject.toml, setup.py or setup.cfg), a bare package
            directory, a single ``.py`` script, or a ``.tar.gz``/``.zip`` source archive; local
            path or gs:// URI (the component must be able to read it).
        package: the staged sdist. Metadata: name, version, sha256, python_module, size,
            requirements, package_uris, cache_hit, wheel_uri, source_kind.
        staging_uri: staging root, gs:// on Vertex AI; empty stages next to this output.
        python_module: module the job runs with ``python -m``. Required for a bare package; for a
            script it names the module the script becomes; for a project the default is
            ``[tool.kfp-spot] python-module`` or its single ``*.task`` module.
        build_wheel: also build and stage a wheel (metadata ``wheel_uri``).
        extra_package_uris: dependency packages (gs:// archives) the job installs after the
            trainer; with it at most 100.
        check_import: import the module in a fresh environment before staging.
        requirements: dependencies of a script or bare package (PEP 508 strings); projects
            declare their own.

    Returns:
        package_uris: the CustomJob's ``pythonPackageSpec.packageUris``: trainer first, then the
        extra packages.
    """
    from kfp_spot.packaging import component_entry

    return component_entry(
        source=source,
        package=package,
        staging_uri=staging_uri,
        python_module=python_module,
        build_wheel=build_wheel,
        extra_package_uris=extra_package_uris,
        check_import=check_import,
        requirements=requirements,
    )
