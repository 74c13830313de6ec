"""``kfp-spot run``'s checks of the evaluation entry point against the source, before a run.

The evaluation imports its entry point only after the whole training: a module the source does
not hold, code the runtime image's Python cannot run, a function the module does not define, or
a threshold on a metric the function never returns would fail the pipeline after a paid job.
These read the source statically and refuse such a run before the emulator starts (what the
evaluation imports: :mod:`.local_evaluation_imports`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kfp_spot.packaging.imports import source_roots
from kfp_spot.packaging.runnable import shadow_reason
from kfp_spot.pipelines.local import LocalRunError
from kfp_spot.vertex.pipeline_parameters import set_parameter


def check_evaluation_module(
    source: str | Path, arguments: Mapping[str, Any], pipeline: Any
) -> None:
    """Refuse a run whose evaluation would import a module its source does not hold.

    When the entry point is left to the pipeline's default (the bundled example's
    ``trainer.evaluate:evaluate``): its module must be in the source directory (at its top or
    under ``src/``), or be the script the source is. One the package names itself (or
    ``--param``) may come from a dependency and is imported by the evaluation; but when its
    top-level package is the source's own, the module must be there too (a typo would fail the
    evaluation only after the whole training).

    Raises:
        LocalRunError: naming ``evaluation_entry_point`` and where to set it.
    """
    from kfp_spot.packaging.sources import is_entry_point

    path, bare = modules_base(Path(source))
    given = arguments.get("evaluation_entry_point")
    if isinstance(given, str) and given and not is_entry_point(given):
        return  # its form is refused by the run's own checks
    if isinstance(given, str) and given:
        module = given.partition(":")[0]
        shadowed = shadow_reason(module)
        if shadowed:
            raise LocalRunError(f"evaluation_entry_point: {given}: {shadowed}")
        _check_not_the_job(Path(source), given, arguments)
        top, _, inner = module.partition(".")
        src_layout = not bare and not (path / "src" / "__init__.py").exists()
        if top == "src" and inner and src_layout and holds(path / "src", inner):
            raise LocalRunError(  # src/ of a src layout is a folder, not a package
                f"evaluation_entry_point: {given}: src/ is the source layout's folder, not a "
                f"package (the build installs what is inside it): name the module "
                f"{inner}:{given.partition(':')[2]}"
            )
        if path.is_dir() and holds(path, top, bare) and not holds(path, module, bare):
            raise LocalRunError(
                f"evaluation_entry_point: {given}: module {module!r} is not in {source}, which "
                f"holds its package {top!r}; name a module of the package (MODULE:FUNCTION)"
            )
        _check_code(path, given)
        return
    default = evaluation_entry(arguments, pipeline)  # the pipeline's (the example's)
    if default is None:
        return
    module = default.partition(":")[0]
    if path.is_dir():
        held = holds(path, module, bare)
    else:  # a script becomes python_module; an archive is looked into by prepare_package
        held = path.suffix != ".py" or arguments.get("python_module") == module
    if held and path.is_dir():
        _check_code(path, default)
    if not held:
        entry = "evaluation_entry_point"
        where = (  # a script or a bare package has no pyproject.toml to name it in
            set_parameter(entry, f"{_script_module(path, arguments)}:FUNCTION")
            if path.suffix == ".py"
            else set_parameter(entry, f"{bare}.MODULE:FUNCTION")
            if bare
            else 'set evaluation-entry-point = "MODULE:FUNCTION" under [tool.kfp-spot] in its '
            f"pyproject.toml, or {set_parameter(entry, 'MODULE:FUNCTION')}"
        )
        raise LocalRunError(
            f"evaluation_entry_point: not set, and the pipeline's default {default} (the bundled "
            f"example's) is not in {source}: {where}"
        )


def _script_module(script: Path, arguments: Mapping[str, Any]) -> str:
    """The module the script becomes: ``python_module``, else its name when that is one."""
    from kfp_spot.packaging.sources import is_module_name

    given = arguments.get("python_module")
    if isinstance(given, str) and given:
        return given
    return script.stem if is_module_name(script.stem) else "MODULE"


def _check_not_the_job(source: Path, entry: str, arguments: Mapping[str, Any]) -> None:
    """Refuse an entry point in the job's own module when importing that module runs the job.

    The job's module is ``python_module``, else a script's name, else the project's
    ``[tool.kfp-spot] python-module``.
    """
    from kfp_spot.packaging import build, runnable
    from kfp_spot.packaging.imports import module_file, parse

    module = entry.partition(":")[0]
    job = arguments.get("python_module")
    if source.is_file() and source.suffix == ".py":
        job = job or source.stem
        found = [source] if module == job else []
    else:
        if not job and source.is_dir():
            job = build.tool_config(source).get("python-module")
        parts = module.split(".")
        found = [p for b in source_roots(source) if (p := module_file(b, parts)) is not None]
        found = found if module == job else []
    for path in found[:1]:
        try:
            tree = parse(path.read_bytes(), str(path))
        except (OSError, SyntaxError, ValueError):
            return
        reason = runnable.import_reason(module, str(path), tree)
        if reason:
            raise LocalRunError(f"evaluation_entry_point: {entry}: {reason}")


def _check_code(directory: Path, entry: str) -> None:
    """Refuse an evaluation module the image's Python cannot run, or that lacks its function."""
    from kfp_spot.evaluation.entry_point import missing_function
    from kfp_spot.image.lock import IMAGE_PYTHON
    from kfp_spot.packaging import pycompat

    module = entry.partition(":")[0]
    for base in source_roots(directory):
        found = pycompat.problems(base, module, IMAGE_PYTHON)
        if found:
            where = "kfp-spot's runtime image, where evaluate-checkpoint runs"
            raise LocalRunError(
                "evaluation_entry_point: " + pycompat.explain(found, module, IMAGE_PYTHON, where)
            )
    missing = missing_function(directory, entry)
    if missing:
        raise LocalRunError(f"evaluation_entry_point: {missing}")


def modules_base(path: Path) -> tuple[Path, str]:
    """Where the source's modules are looked up, and the one package there when it is bare.

    A bare package (an ``__init__.py``, no project file) is built as the package named after its
    directory: ``trainer/evaluate.py`` is ``trainer.evaluate``, looked up from the parent, which
    holds nothing else of the package.
    """
    from kfp_spot.packaging.sources import PROJECT_FILES

    if not (path / "__init__.py").is_file() or any((path / f).exists() for f in PROJECT_FILES):
        return path, ""
    return path.resolve().parent, path.resolve().name


def holds(directory: Path, module: str, bare: str = "") -> bool:
    """Whether source ``directory`` holds ``module`` (at its top or under ``src/``).

    A module file of any suffix counts (an extension the build compiles), and so does a folder
    (a package, namespace packages too). ``bare``: the one package a bare package's parent holds.
    """
    if bare and module.split(".")[0] != bare:
        return False
    relative = Path(*module.split("."))
    for base in source_roots(directory):
        where = base / relative
        if where.is_dir() or (where.parent.is_dir() and any(where.parent.glob(f"{where.name}.*"))):
            return True
    return False


def evaluation_entry(arguments: Mapping[str, Any], pipeline: Any) -> str | None:
    """The entry point the run's evaluation calls: given, else the pipeline's default, else None.

    An empty default means the package's declared one, else the bundled example's; None when
    the pipeline takes no entry point or it is left empty for a template's own reasons.
    """
    from kfp_spot.evaluation.entry_point import DEFAULT_ENTRY_POINT
    from kfp_spot.packaging.sources import is_entry_point

    given = arguments.get("evaluation_entry_point")
    if isinstance(given, str) and given:
        return given if is_entry_point(given) else None  # else refused for its form
    declared = (pipeline.component_spec.inputs or {}).get("evaluation_entry_point")
    default = getattr(declared, "default", None)
    if declared is not None and default == "":
        default = DEFAULT_ENTRY_POINT
    if "evaluation_entry_point" in arguments or not isinstance(default, str) or ":" not in default:
        return None
    return default


def check_threshold_metrics(
    source: str | Path, arguments: Mapping[str, Any], pipeline: Any
) -> None:
    """Refuse thresholds on a metric the evaluation function surely never returns.

    The gate compares only what ``evaluate()`` returns, and a threshold on any other metric
    fails the evaluation, after the whole training. Judged only when every ``return`` of the
    function (read statically, at its module's top level) is a dict written out with text keys
    and no ``**``: then those keys are every metric it can return.

    Raises:
        LocalRunError: naming ``thresholds``, the metric and the metrics the function returns.
    """
    thresholds = arguments.get("thresholds")
    if isinstance(thresholds, str):  # a dict may arrive as its JSON text
        try:
            thresholds = json.loads(thresholds)
        except ValueError:
            return  # the run's own checks say what a thresholds mapping is
    entry = evaluation_entry(arguments, pipeline) if "source" in arguments else None
    if not isinstance(thresholds, Mapping) or not thresholds or entry is None:
        return
    from kfp_spot.evaluation.errors import EvaluationInputError
    from kfp_spot.evaluation.thresholds import parse_thresholds

    try:
        parse_thresholds(thresholds)
    except EvaluationInputError:
        return  # refused for its form by the run's own checks, once
    keys = _returned_keys(Path(source), entry, arguments)
    if keys is None:
        return
    unknown = [str(metric) for metric in thresholds if metric not in keys]
    if unknown:
        listed = ", ".join(sorted(keys)) or "no metrics"
        raise LocalRunError(
            f"thresholds: {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} not among the metrics {entry} returns "
            f"({listed}, read from its return statements): the evaluation would fail after the "
            "training; gate on one of them"
        )


def _returned_keys(path: Path, entry: str, arguments: Mapping[str, Any]) -> set[str] | None:
    """The metric names ``entry``'s function can return, when its returns show them all."""
    import ast

    from kfp_spot.packaging.imports import module_file, parse

    module, _, function = entry.partition(":")
    if path.is_file():
        job = arguments.get("python_module") or path.stem
        found = path if path.suffix == ".py" and job == module else None
    else:
        base, bare = modules_base(path)
        roots = [base] if bare else list(source_roots(base))
        found = next(
            (f for r in roots if (f := module_file(r, module.split("."))) is not None), None
        )
    if found is None:
        return None
    try:
        tree = parse(found.read_bytes(), str(found))
    except (OSError, SyntaxError, ValueError):
        return None
    defined = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function
    ]
    rebound = any(  # `evaluate = wrap(evaluate)`: the returns are not the function's alone
        isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        and function in {t.id for t in ast.walk(node) if isinstance(t, ast.Name)}
        for node in tree.body
    )
    if len(defined) != 1 or defined[0].decorator_list or rebound:
        return None
    returns: list[ast.Return] = []
    pending: list[ast.AST] = list(defined[0].body)
    while pending:  # its own returns, not those of functions or classes defined inside it
        node = pending.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    keys: set[str] = set()
    for node in returns:
        if not isinstance(node.value, ast.Dict):
            return None
        for key in node.value.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return None  # ** unpacking, or a key computed at run time
            keys.add(key.value)
    keys.discard("confusion_matrix")  # returned beside the metrics, not one of them
    return keys if returns else None
