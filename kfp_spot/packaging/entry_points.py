"""The package's own evaluation entry point, checked against the built package before staging.

evaluate_checkpoint imports ``[tool.kfp-spot] evaluation-entry-point`` only after the whole
training: a module the build left out (a top-level ``score.py`` beside a ``src/`` package, a
package the build's ``packages`` does not list), a misspelt module of the package itself or a
function the module does not define failed the pipeline after a paid job. prepare_package has
the built wheel: :func:`check_entry_point` reads it there, statically (nothing is imported).

:func:`declared_entry_point` is the one reader of the table's key: prepare_package reads the
source with it, and :func:`staged_entry_point` a staged package's sdist (an evaluation given no
entry point calls the package's own).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from kfp_spot.packaging import build as _build
from kfp_spot.packaging import imports, runnable
from kfp_spot.packaging.errors import PackagingError
from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_archive, is_entry_point, materialize

FIELD = "pyproject.toml [tool.kfp-spot] evaluation-entry-point"


def declared_entry_point(project: Path) -> str:
    """``[tool.kfp-spot] evaluation-entry-point`` of the project, checked for its form, or "".

    The evaluation imports it only after training: a typo is refused here, before the job.
    """
    value = _build.tool_config(project).get("evaluation-entry-point", "")
    if value != "" and not is_entry_point(value):
        raise PackagingError("source", f"{FIELD} {value!r} is not {ENTRY_POINT_FORM}")
    shadowed = runnable.shadow_reason(str(value).partition(":")[0]) if value else None
    if shadowed:
        raise PackagingError(
            "source", f"{FIELD} {value!r}: {shadowed}; the evaluation would fail after the training"
        )
    return str(value)


def staged_entry_point(package_uri: str) -> str:
    """The entry point a staged package declares, read from its sdist as from a source, or "".

    ``package_uri``: a local path or gs:// URI, as in ``PackageInfo.package_uris``; "" for a
    wheel, which carries no pyproject.toml.

    Raises:
        PackagingError: the archive cannot be read, or declares a malformed entry point.
    """
    if not is_archive(package_uri.rstrip("/").rsplit("/", 1)[-1]):
        return ""
    with tempfile.TemporaryDirectory(prefix="kfp-spot-package-") as work:
        return declared_entry_point(materialize(package_uri, Path(work)).path)


def _module_file(files: Sequence[str], module: str) -> str | None:
    """The wheel file of ``module``: a package's ``__init__.py`` before a same-named ``.py``.

    As Python finds it, and :func:`kfp_spot.packaging.imports.module_file` on disk.
    """
    stem = module.replace(".", "/")
    return next((f for f in (f"{stem}/__init__.py", f"{stem}.py") if f in files), None)


def check_entry_point(
    wheel: Path, facts: _build.WheelFacts, entry_point: str, source_tree: Path
) -> None:
    """Refuse an entry point the built package cannot serve.

    Args:
        wheel: the built wheel.
        facts: its facts.
        entry_point: ``module:function`` (its form already checked).
        source_tree: the project as it was built (to tell a module the build left out from one
            a dependency brings).

    Raises:
        PackagingError: naming ``source`` and the entry point: its module is missing from the
            package while its top-level package, or the module's own file in the source, is
            there; or the module does not define the function.
    """
    module, _, function = entry_point.partition(":")
    parts = module.split(".")
    path = _module_file(facts.files, module)
    if path is None:
        if any(f.endswith((".so", ".pyd")) for f in facts.files):
            return  # an extension module may be it
        top_packaged = any(f.split("/")[0] in (parts[0], f"{parts[0]}.py") for f in facts.files)
        in_source = any(
            imports.module_file(base, parts) is not None
            for base in imports.source_roots(source_tree)
        )
        if top_packaged or in_source:
            why = (
                "it is in the source but the build leaves it out (list it in the build's "
                "packages or py-modules)"
                if in_source
                else f"the package holds {parts[0]!r} but not this module"
            )
            inner = ".".join(parts[1:])
            if parts[0] == "src" and inner and _module_file(facts.files, inner):
                why = (  # src/ of a src layout is a folder: the build installs what is in it
                    f"src/ is the source layout's folder, not a package: name the module "
                    f"{inner}:{function}"
                )
            raise PackagingError(
                "source",
                f"{FIELD} {entry_point!r}: module {module!r} is not in the built package "
                f"{facts.name} {facts.version}: {why}; the evaluation would fail after the "
                "training",
            )
        return  # may come from a dependency: the evaluation imports it
    try:
        tree = imports.parse(_build.read_wheel_file(wheel, path))
    except (SyntaxError, ValueError):
        return  # the import reports it, with its line
    names = imports.bound_names(tree)
    if names is not None and function not in names:
        defined = imports.functions(tree)
        raise PackagingError(
            "source",
            f"{FIELD} {entry_point!r}: {path} defines no {function!r} (its functions: "
            f"{', '.join(defined) or 'none'}); the evaluation would fail after the training",
        )
