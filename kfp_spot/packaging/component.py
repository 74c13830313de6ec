"""The adapter between the ``prepare_package`` component and :func:`prepare_package`."""

from __future__ import annotations

import inspect
import logging
from typing import NamedTuple

from kfp_spot.artifacts import Artifact
from kfp_spot.envcache import default_cache_dir
from kfp_spot.executors import DEFAULT_EXECUTOR_IMAGE
from kfp_spot.packaging.core import prepare_package
from kfp_spot.packaging.errors import PackagingError
from kfp_spot.validation.component_inputs import InputReader
from kfp_spot.validation.inputs import report_input_errors

# What a missing, None or "" input means: prepare_package's own defaults (sequences as lists).
INPUT_DEFAULTS = {
    name: list(p.default) if isinstance(p.default, tuple) else p.default
    for name, p in inspect.signature(prepare_package).parameters.items()
    if p.default is not inspect.Parameter.empty
}


class PrepareOutputs(NamedTuple):
    """The component's output parameters (KFP reads them by field name)."""

    package_uris: list[str]


def component_entry(
    *,
    source: str,
    package: Artifact,
    staging_uri: str = "",
    python_module: str = "",
    build_wheel: bool = False,
    extra_package_uris: list[str] | None = None,
    check_import: bool = False,
    requirements: list[str] | None = None,
    include_kfp_spot: bool = True,
    executor_image_uri: str = DEFAULT_EXECUTOR_IMAGE,
) -> PrepareOutputs:
    """Run :func:`prepare_package` for the component and fill its ``package`` artifact.

    Args:
        source: see :func:`prepare_package`.
        package: the output artifact (duck-typed: ``.uri``, ``.metadata``); its URI becomes the
            staged sdist's URI.
        staging_uri: the staging root; empty stages next to the output artifact.
        python_module: see :func:`prepare_package`.
        build_wheel: see :func:`prepare_package`.
        extra_package_uris: see :func:`prepare_package`.
        check_import: see :func:`prepare_package`.
        requirements: see :func:`prepare_package`.
        include_kfp_spot: see :func:`prepare_package`.
        executor_image_uri: see :func:`prepare_package`.

    Returns:
        The package URIs for the CustomJob (trainer first).

    Raises:
        PackagingError: naming the input at fault (in a KFP task: the task ends with that one
            line, no traceback).
    """
    if not logging.getLogger().handlers:  # the task log shows what was built and staged
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    staging = staging_uri or package.uri
    with report_input_errors(PackagingError):  # in a KFP task: one line naming the input
        # Read as KFP hands them over: a list as its JSON text too, "true"/"false" as booleans;
        # a bare string is not a list (its letters would be read as URIs), "yes" no boolean.
        read = InputReader(
            {
                "build_wheel": build_wheel,
                "check_import": check_import,
                "include_kfp_spot": include_kfp_spot,
                "extra_package_uris": extra_package_uris,
                "requirements": requirements,
            },
            INPUT_DEFAULTS,
            PackagingError,
        )
        info = prepare_package(
            source,
            staging,
            python_module=python_module,
            build_wheel=read.boolean("build_wheel"),
            extra_package_uris=read.strings("extra_package_uris"),
            check_import=read.boolean("check_import"),
            requirements=read.strings("requirements"),
            include_kfp_spot=read.boolean("include_kfp_spot"),
            executor_image_uri=executor_image_uri or DEFAULT_EXECUTOR_IMAGE,
            # The same source is built once per machine (a fresh task container: every time).
            build_cache_dir=default_cache_dir(),
        )
    package.uri = info.uri
    package.metadata.update(info.metadata())
    package.metadata["staging_uri"] = info.uri.rsplit("/", 3)[0]
    return PrepareOutputs(list(info.package_uris))
