"""The evaluation entry point's form: ``module:function``, checked before anything is imported.

Its own module so that what checks arguments before a run (``kfp-spot run``) reads the rule
without loading the evaluator.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kfp_spot.evaluation.errors import EvaluationInputError
from kfp_spot.packaging.imports import bound_names, functions, module_file, parse, source_roots
from kfp_spot.packaging.runnable import shadow_reason
from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_entry_point

DEFAULT_ENTRY_POINT = "trainer.evaluate:evaluate"
"""The evaluation entry point of a package that names none (the bundled example's)."""


DEFAULTED = (
    "; {default} is the default (the bundled example's), used because none was given and the "
    "package declares none: pass entry_point='MODULE:FUNCTION', or declare "
    'evaluation-entry-point = "MODULE:FUNCTION" under [tool.kfp-spot] in its pyproject.toml'
)
"""What an entry point that fails to load adds when it was the default nobody chose."""


def resolve_entry_point(given: str, package_metadata: Mapping[str, Any]) -> str:
    """The entry point the component passes on: ``given``, else the package's recorded one.

    The package's is its ``[tool.kfp-spot] evaluation-entry-point``, which prepare_package
    records in the package artifact's metadata as ``evaluation_entry_point``. "" when neither:
    :func:`entry_point_for` reads the package itself, as for any caller of ``evaluate()``.
    """
    named = package_metadata.get("evaluation_entry_point")
    return given or (named if isinstance(named, str) else "")


def entry_point_for(given: Any, package_uris: Any) -> tuple[Any, str]:
    """The entry point ``evaluate()`` calls, and what to add to an error loading it.

    ``given`` when not empty; else the one the package declares (``[tool.kfp-spot]
    evaluation-entry-point`` of its sdist, the first of ``package_uris``, read as prepare_package
    reads a source); else :data:`DEFAULT_ENTRY_POINT`, with :data:`DEFAULTED` as the hint.

    Raises:
        EvaluationInputError: naming ``package``, when its sdist cannot be read or declares a
            malformed entry point.
    """
    if given != "":
        return given, ""
    first = package_uris[0] if isinstance(package_uris, (list, tuple)) and package_uris else None
    if isinstance(first, str):
        from kfp_spot.packaging.entry_points import staged_entry_point
        from kfp_spot.packaging.errors import PackagingError

        try:
            declared = staged_entry_point(first)
        except PackagingError as exc:
            reason = str(exc).removeprefix(f"{exc.field}: ")
            raise EvaluationInputError("package", f"{first}: {reason}") from None
        if declared:
            return declared, ""
    return DEFAULT_ENTRY_POINT, DEFAULTED.format(default=DEFAULT_ENTRY_POINT)


def check_entry_point(entry_point: Any) -> None:
    """Check that ``entry_point`` reads as ``module:function`` that can be imported (later).

    Raises:
        EvaluationInputError: naming ``entry_point`` and the form it must have, or the
            standard module its module's name is (which the import would find instead).
    """
    if not is_entry_point(entry_point):
        raise EvaluationInputError("entry_point", f"{entry_point!r} is not {ENTRY_POINT_FORM}")
    shadowed = shadow_reason(entry_point.partition(":")[0])
    if shadowed:
        raise EvaluationInputError("entry_point", f"{entry_point!r}: {shadowed}")


def missing_function(directory: Path, entry_point: str) -> str | None:
    """Why ``entry_point``'s function is surely not in its module under source ``directory``.

    Read statically (nothing is imported), at the source's top or under ``src/``: a misspelt
    function fails the evaluation only after the whole training. None when the module is not
    there, does not parse, may bind names dynamically (``__getattr__``, ``*`` imports) or binds
    the name.
    """
    module, _, function = entry_point.partition(":")
    for base in source_roots(directory):
        path = module_file(base, module.split("."))
        if path is None:
            continue
        try:
            tree = parse(path.read_bytes(), str(path))
        except (OSError, SyntaxError, ValueError):
            return None
        bound = bound_names(tree)
        if bound is None or function in bound:
            return None
        defined = functions(tree)
        return (
            f"{entry_point}: module {module!r} ({path}) defines no {function!r} (its "
            f"functions: {', '.join(defined) or 'none'}); name one of them (MODULE:FUNCTION)"
        )
    return None


def environ_for(python: Path, entry_point: str, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without the variables the entry point's own package reads that only it sets.

    On Vertex AI the evaluation runs in the pipeline task's container, without the variables of
    the shell that started a local run: an ``evaluate()`` reading ``DATA_PATH`` from it passed
    locally and failed there (:func:`kfp_spot.packaging.envreads.host_only`). What is left out
    is logged, with where the code reads it.
    """
    import logging

    from kfp_spot import envcache
    from kfp_spot.packaging import envreads

    module = entry_point.partition(":")[0]
    read = envreads.reads(envcache.site_packages_of(str(python)), module)
    hidden = envreads.host_only(read, base)
    if hidden:
        logging.getLogger(__name__).warning(
            "the evaluation's code reads %s: set on this machine only, so the entry point runs "
            "without it here as it would in the task's container on Vertex AI. Give the value "
            "through params, or set it on the task (task.set_env_variable).",
            envreads.described(hidden),
        )
    return {k: v for k, v in base.items() if k not in hidden}
