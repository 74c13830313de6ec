"""``kfp-spot run``'s training source: the arguments it sets and its problems, before a run.

The package's own ``[tool.kfp-spot]`` settings (a directory's or an archive's pyproject.toml),
the bundled example's arguments and gate for the example only, and the problems of the source
that are found before anything starts (:func:`arguments_and_problems`): the run reports them
together (:func:`together`), so a user fixes them all before trying again.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kfp_spot.packaging.sources import (
    LOCAL_RUNS_DIR,
    PROJECT_FILES,
    bare_package_module_problem,
    bare_package_name_problem,
    requirements_problem,
    source_directory_problem,
)
from kfp_spot.pipelines.local import LocalRunError
from kfp_spot.pipelines.local_arguments import together
from kfp_spot.vertex.pipeline_parameters import set_parameter

__all__ = [
    "EXAMPLE_ARGUMENTS",
    "EXAMPLE_SOURCE",
    "TOOL_KEYS",
    "arguments_and_problems",
    "check_outside",
    "job_module_problem",
    "job_python_problem",
    "package_arguments",
    "source_tree",
    "spot_training_arguments",
    "together",
]

EXAMPLE_SOURCE = Path(__file__).resolve().parents[1] / "examples" / "trainer"
EXAMPLE_ARGUMENTS: dict[str, Any] = {
    "training_args": ["--epochs", "20", "--checkpoint-every", "3", "--step-seconds", "0.1"],
    "thresholds": {"accuracy": ">=0.85"},
}
"""What the bundled example trainer is run with (a short run; a digits classifier's gate)."""

TOOL_KEYS = {"python-module": "python_module", "evaluation-entry-point": "evaluation_entry_point"}
"""``[tool.kfp-spot]`` keys of a package's pyproject.toml and the parameters they set."""


def _tool_config(pyproject: str, tables: Mapping[str, Any]) -> Mapping[str, Any]:
    """``[tool.kfp-spot]``, refusing what would be ignored: a misspelt table name or key.

    An ignored key would not fail here: the run would fall back to the default module or
    evaluation entry point and fail later, the evaluation only after the whole training.
    """
    valid = ", ".join(TOOL_KEYS)
    for table in tables:
        if table != "kfp-spot" and table.replace("_", "-").lower() in ("kfp-spot", "kfpspot"):
            raise LocalRunError(
                f"{pyproject}: [tool.{table}] is not read; the table is [tool.kfp-spot] "
                f"(keys: {valid})"
            )
    config = tables.get("kfp-spot") or {}
    if not isinstance(config, Mapping):
        raise LocalRunError(f"{pyproject}: [tool.kfp-spot] must be a table (keys: {valid})")
    for key in config:
        if key not in TOOL_KEYS:
            near = str(key).replace("_", "-").lower()
            hint = f"; did you mean {near!r}?" if near in TOOL_KEYS else ""
            raise LocalRunError(
                f"{pyproject}: [tool.kfp-spot] has no key {key!r} (its keys: {valid}){hint}"
            )
    return config


def package_arguments(source: str | Path) -> dict[str, Any]:
    """The pipeline arguments a package's own pyproject.toml sets (``[tool.kfp-spot]``).

    Also the example's training arguments and gate when ``source`` is the bundled example.

    Raises:
        LocalRunError: ``source`` does not exist, is a file prepare_package does not build
            (neither a ``.py`` script nor a source archive), or ``[tool.kfp-spot]`` has a key it
            does not know, a value that is not text or an entry point that is not
            ``module:function``.
    """
    if not isinstance(source, (str, Path)):
        raise LocalRunError(
            f"source: expected a path (str or pathlib.Path), got {type(source).__name__}"
        )
    from kfp_spot.packaging.sources import is_archive, missing_source, source_file_problem

    path = Path(source)
    if not path.exists():
        raise LocalRunError(f"training source {missing_source(str(source))}")
    arguments: dict[str, Any] = {}
    if path.resolve() == EXAMPLE_SOURCE:
        arguments.update(EXAMPLE_ARGUMENTS)
    if not path.is_dir() and (problem := source_file_problem(path, str(source))):
        raise LocalRunError(f"source: {problem}")  # before the emulator starts, not in a task
    if path.is_file() and is_archive(path.name):
        # the archive's own pyproject.toml, found as prepare_package finds it
        from kfp_spot.packaging import PackagingError
        from kfp_spot.packaging.sources import materialize

        with tempfile.TemporaryDirectory(prefix="kfp-spot-source-") as work:
            try:
                tree = materialize(str(path), Path(work))
            except PackagingError:
                return arguments  # prepare_package says what is wrong with it, first thing
            if not tree.generated:
                arguments.update(_tool_arguments(tree.path, f"{path} (its pyproject.toml)"))
    else:
        arguments.update(_tool_arguments(path, str(path / "pyproject.toml")))
    return arguments


def _tool_arguments(project: Path, label: str) -> dict[str, Any]:
    """The arguments ``project``'s ``[tool.kfp-spot]`` sets; errors name ``label``."""
    from kfp_spot.packaging.build import tool_tables

    arguments: dict[str, Any] = {}
    if (project / "pyproject.toml").is_file():
        try:
            tables = tool_tables(project)
        except ValueError as exc:  # packaging's BuildError: "source: pyproject.toml is not ..."
            reason = str(exc).removeprefix("source: ").removeprefix("pyproject.toml is ")
            raise LocalRunError(f"{label}: {reason}") from None
        config = _tool_config(label, tables)
        for key, name in TOOL_KEYS.items():
            value = config.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise LocalRunError(
                    f"{label}: [tool.kfp-spot] {key} must be a non-empty string, got {value!r}"
                )
            arguments[name] = value
    from kfp_spot.packaging.sources import MODULE_FORM, is_module_name

    module = arguments.get("python_module")
    if module is not None and not is_module_name(module):  # else refused once the run started
        raise LocalRunError(
            f"{label}: [tool.kfp-spot] python-module: {module!r} is not {MODULE_FORM}"
        )
    entry_point = arguments.get("evaluation_entry_point")
    if entry_point is not None:  # imported only after training: a typo would cost the run
        from kfp_spot.packaging.sources import ENTRY_POINT_FORM, is_entry_point

        if not is_entry_point(entry_point):
            raise LocalRunError(
                f"{label}: [tool.kfp-spot] evaluation-entry-point: {entry_point!r} is not "
                f"{ENTRY_POINT_FORM}"
            )
    return arguments


def spot_training_arguments(
    source: str | Path,
    *,
    training_args: Sequence[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
    declared: set[str] | None = None,
) -> dict[str, Any]:
    """The pipeline arguments :func:`run_local` runs ``source`` with (see its arguments).

    ``declared``: the parameters of a template of the user's own, which need not be
    spot_training's: what the run adds by itself (the source, its ``[tool.kfp-spot]`` settings,
    the example's arguments, the empty gate) goes only to the ones it declares, and to none of
    a template that declares no ``source`` (it trains none).

    Raises:
        LocalRunError: as :func:`package_arguments`; or a template that declares no ``source``
            is given a source other than the bundled example (naming its parameters); a source
            directory prepare_package would refuse (no project file, no package, a bare
            package whose directory name is no package name); ``training_args`` is a text
            rather than a list; or, reported together, a bare package without
            ``python_module`` and ``requirements`` given for a project.
    """
    arguments, problems = arguments_and_problems(
        source,
        training_args=training_args,
        thresholds=thresholds,
        parameters=parameters,
        declared=declared,
    )
    if problems:
        raise LocalRunError(together(problems))
    return arguments


def arguments_and_problems(
    source: str | Path,
    *,
    training_args: Sequence[str] | None,
    thresholds: dict[str, Any] | None,
    parameters: Mapping[str, Any] | None,
    declared: set[str] | None,
    tree: Path | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """:func:`spot_training_arguments`' arguments, and the problems that do not stop the rest.

    A problem that makes the others moot (no source, a source of no kind prepare_package
    builds, a bare package under a name no ``import`` takes) raises at once; the others are
    returned, so the run reports them together with its own checks.

    ``tree``: the folder a source archive unpacks to (:func:`source_tree`), checked as the
    source directory it holds.

    Raises:
        LocalRunError: as :func:`spot_training_arguments`, for the problems that make the
            others moot.
    """
    arguments = {"source": str(source), **package_arguments(source)}
    checked = tree or Path(source)
    # The pipeline's default gate is the example's accuracy bound; another package's evaluate()
    # returns its own metrics, so it is gated only on the thresholds it is given.
    arguments.setdefault("thresholds", {})
    if declared is not None:
        if "source" not in declared and Path(source).resolve() != EXAMPLE_SOURCE:
            raise LocalRunError(
                f"the template has no 'source' parameter to take the training source {source}; "
                f"valid: {', '.join(sorted(declared))} (pipeline parameters: "
                f"{set_parameter('NAME')})"
            )
        # A template without `source` trains no source: nothing of the (default) example's
        # arguments, gate included, is its own; its parameters keep their defaults.
        taken = declared if "source" in declared else set()
        arguments = {k: v for k, v in arguments.items() if k in taken}
    if "source" in arguments and checked.is_dir():  # else refused once the run started
        problem = source_directory_problem(checked, str(checked)) or (
            bare_package_name_problem(checked, str(checked))
        )
        if problem:
            raise LocalRunError(f"source: {problem}")
    if training_args is not None:
        if isinstance(training_args, (str, bytes)):  # list() would pass one per character
            raise LocalRunError(
                f"training_args: {training_args!r} is one text; give a list of arguments such "
                "as ['--steps', '40']"
            )
        arguments["training_args"] = list(training_args)
    if thresholds is not None:
        arguments["thresholds"] = thresholds
    arguments.update(parameters or {})
    problems = []
    if "source" in arguments and checked.is_dir():  # refused now, not once the run started
        unset = "" if declared is None or "python_module" in declared else "-"  # a template's own
        module = arguments.get("python_module", unset)
        if problem := bare_package_module_problem(checked, module):
            problems.append(f"python_module: {problem} ({set_parameter('python_module')})")
        elif module == "" and any((checked / f).is_file() for f in PROJECT_FILES):
            from kfp_spot.packaging.taskmodule import source_ambiguity

            # prepare_package's own refusal, which would come once the run started
            if problem := source_ambiguity(checked, checked.resolve().name):
                problems.append(f"python_module: {problem} ({set_parameter('python_module')})")
        if problem := requirements_problem(
            checked, str(checked), arguments.get("requirements") or []
        ):
            problems.append(f"requirements: {problem}")
    return arguments, problems


def check_outside(run_dir: Path, source: str | Path) -> None:
    """Refuse a run directory inside (or being) the source directory, but in its runs folder.

    The run would write its emulator, checkpoints and report among the package's files, which
    the next run's package would then hold. The source's own ``kfp-spot-runs/`` (where
    ``kfp-spot run --source .`` puts its runs by default) is never packaged, so a run there is
    fine.

    Raises:
        LocalRunError: naming both.
    """
    tree, target = Path(source).resolve(), run_dir.resolve()
    if not tree.is_dir() or not (target == tree or tree in target.parents):
        return
    if (tree / LOCAL_RUNS_DIR) in target.parents:
        return
    raise LocalRunError(
        f"run_dir: {run_dir} is inside the training source {source}: the run's files would be "
        f"packaged with it; give a directory outside the source or under its {LOCAL_RUNS_DIR}/, "
        "which is never packaged (--run-dir)"
    )


def job_python_problem(
    source: str | Path, arguments: Mapping[str, Any], pipeline: Any
) -> str | None:
    """Why the job's module cannot run on its executor image's Python, read before the run.

    The emulator refuses such a job only once it is submitted, after the package was built; on
    Vertex AI it fails at its import on the VM. The module is ``python_module`` (given, or the
    package's ``[tool.kfp-spot]``; a script's name), read with what it imports of its own
    package, as ``check_import`` reads it (:mod:`kfp_spot.packaging.pycompat`). None when the
    module is not known before the build (a project that names none) or the image is refused
    elsewhere.
    """
    from kfp_spot import executors
    from kfp_spot.packaging import pycompat
    from kfp_spot.packaging.imports import module_file, source_roots

    path = Path(source)
    given = (pipeline.component_spec.inputs or {}).get("executor_image_uri")
    uri = arguments.get("executor_image_uri") or (given.default if given else "")
    if "source" not in arguments or not uri or not path.exists():
        return None
    try:
        image = executors.profile(str(uri))
    except executors.ExecutorImageError:
        return None  # refused with its own message by the launch's checks
    module = arguments.get("python_module") or ""
    if not isinstance(module, str):
        return None
    if path.is_file():
        module = module or path.stem
        found = pycompat.file_problems(path, path.name, image.python, module)
    elif not module:
        return None
    else:
        bare = (path / "__init__.py").is_file() and not any(
            (path / f).is_file() for f in PROJECT_FILES
        )
        roots = [path.resolve().parent] if bare else list(source_roots(path))
        root = next((r for r in roots if module_file(r, module.split(".")) is not None), None)
        found = pycompat.problems(root, module, image.python) if root is not None else []
    if not found:
        return None
    return "python_module: " + pycompat.explain(found, module, image.python, image.image)


@contextlib.contextmanager
def source_tree(source: str | Path) -> Iterator[tuple[Path | None, str]]:
    """The folder a local source archive unpacks to, for the checks before a run, and its name.

    Yields ``(None, "")`` for any other source (a directory or a script is checked as it is) and
    for an archive that does not unpack (prepare_package says why, first thing). Else the folder
    (removed afterwards) and how messages name it: ``ARCHIVE's TOP/``, or the archive.
    """
    from kfp_spot.packaging import PackagingError
    from kfp_spot.packaging.sources import extract_archive, is_archive

    path = Path(source) if isinstance(source, (str, Path)) else None  # else refused as no path
    if path is None or not (path.is_file() and is_archive(path.name)):
        yield None, ""
        return
    with tempfile.TemporaryDirectory(prefix="kfp-spot-source-") as work:
        dest = Path(work) / "unpacked"
        try:
            root: Path | None = extract_archive(path, dest, str(source))
        except PackagingError:
            root = None
        shown = f"{source}'s {root.name}/" if root is not None and root != dest else str(source)
        yield root, shown


def job_module_problem(source: str | Path, arguments: Mapping[str, Any]) -> str | None:
    """Why the source directory surely does not hold the module the job runs, or None.

    prepare_package refuses it once the run has started, after the build. Judged for a bare
    package (its modules are its directory's) and for a module whose top-level package the
    source holds (at its top or under ``src/``), as for the evaluation entry point.
    """
    from kfp_spot.packaging.imports import source_roots
    from kfp_spot.packaging.sources import is_module_name
    from kfp_spot.pipelines.local_evaluation import holds, modules_base

    module = arguments.get("python_module")
    path = Path(source)
    if "source" not in arguments or not isinstance(module, str) or not is_module_name(module):
        return None
    if not path.is_dir():
        return None
    base, bare = modules_base(path)
    top = module.split(".")[0]
    if bare and top != bare:
        return (
            f"python_module: {module!r} is not inside the package {bare!r} that {source} holds "
            f"(a bare package is the package its directory names): e.g. {bare}.task"
        )
    if not holds(base, top, bare) or holds(base, module, bare):
        return None
    found = sorted(
        ".".join(file.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for root in source_roots(base)
        if (root / top).is_dir()
        for file in (root / top).rglob("*.py")
        if "__pycache__" not in file.parts
    )
    listed = ", ".join(found[:20]) + (", ..." if len(found) > 20 else "")
    return (
        f"python_module: {module!r} is not in {source}, which holds its package {top!r} "
        f"(its modules: {listed or 'none'}); name the module the job runs"
    )
