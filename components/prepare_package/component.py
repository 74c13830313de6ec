"""KFP interface of ``prepare_package``: the runtime is :mod:`kfp_spot.packaging`."""

from typing import NamedTuple

from kfp.dsl import Artifact, Output

from kfp_spot.components.factory import component


@component(cacheable=False)
def prepare_package(
    source: str,
    package: Output[Artifact],
    staging_uri: str = "",
    python_module: str = "",
    build_wheel: bool = False,
    extra_package_uris: list = [],
    check_import: bool = False,
    requirements: list = [],
    include_kfp_spot: bool = True,
    executor_image_uri: str = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
) -> NamedTuple("Outputs", [("package_uris", list[str])]):
    """Builds training code into a reproducible sdist named by its sha256 and stages it.

    The same source always gives the same bytes, staged at ``<staging>/<name>/<sha256>/<file>``;
    a package already staged is not uploaded again (metadata ``cache_hit``). Before anything is
    staged, the module the job runs must be in the built package and compile; optionally it must
    import in the environment its executor image gives it. A package that imports ``kfp_spot``
    gets the light ``kfp-spot-trainer`` wheel (this kfp-spot's trainer library, same version)
    staged next to it and appended to its package URIs, so the training VM can import it.

    Args:
        package: Output (see Returns).
        source: a project directory (pyproject.toml, setup.py or setup.cfg), a bare package
            directory, a single ``.py`` script, or a ``.tar.gz``/``.zip`` source archive; local
            path or gs:// URI (the component must be able to read it).
        staging_uri: staging root, gs:// on Vertex AI; empty stages next to this output.
        python_module: module the job runs with ``python -m``. Required for a bare package; for a
            script it names the module the script becomes; for a project the default is
            ``[tool.kfp-spot] python-module`` or its single ``*.task`` module.
        build_wheel: also build and stage a wheel (metadata ``wheel_uri``).
        extra_package_uris: dependency packages (gs:// archives) the job installs after the
            trainer; with it at most 100.
        check_import: import the module before staging, in an environment holding only what
            ``executor_image_uri`` provides, the package URIs and their declared dependencies;
            and the declared evaluation entry point's module in kfp-spot's runtime image's.
        requirements: dependencies of a script or bare package (PEP 508 strings); projects
            declare their own.
        include_kfp_spot: add the kfp-spot-trainer wheel when the package imports kfp_spot (and
            does not declare kfp-spot); False when the job gets kfp-spot another way.
        executor_image_uri: the prebuilt training image the job runs in (one of Vertex AI's);
            ``check_import`` checks against what it holds.

    Returns:
        package: the staged sdist: launch_spot_job's and evaluate_checkpoint's ``package``.
            Metadata: name, version, sha256, python_module, size, requirements, package_uris,
            cache_hit, wheel_uri, source_kind, kfp_spot_uri.
        package_uris: the CustomJob's ``pythonPackageSpec.packageUris``: trainer first, then
            the extra packages, then the kfp-spot-trainer wheel when added.
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
        include_kfp_spot=include_kfp_spot,
        executor_image_uri=executor_image_uri,
    )
