"""``kfp-spot run``'s check of what the evaluation imports, against its environment, before a run.

The evaluation runs in kfp-spot's runtime image (kfp-spot and its dependencies, the package and
what it declares), not in the training's executor image: a library only the executor image holds
trains, then fails the evaluation after the whole training. Read statically, before the emulator
starts.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kfp_spot.packaging.imports import source_roots
from kfp_spot.pipelines.local import LocalRunError
from kfp_spot.pipelines.local_evaluation import evaluation_entry, modules_base
from kfp_spot.vertex.pipeline_parameters import set_parameter


def check_evaluation_imports(
    source: str | Path, arguments: Mapping[str, Any], pipeline: Any
) -> None:
    """Refuse an evaluation module importing a library its environment will not hold.

    The evaluation runs in kfp-spot's runtime image (kfp-spot and its dependencies, the package
    and what it declares), not in the training's executor image: ``import sklearn`` in a package
    that does not declare scikit-learn trains on the executor image, then fails the evaluation
    after the whole training. Read statically: the entry point's module and the modules of its
    own package it imports (inside functions too; not those the code is ready to miss, under a
    ``try`` that catches ``ImportError``). A library is judged only when this machine has it
    installed (its distribution known), and not at all when the package declares a requirement
    this machine does not have (pip would fetch it, with modules unknown here) or declares its
    dependencies only at build time (setup.py, ``dynamic``).

    Raises:
        LocalRunError: naming ``evaluation_entry_point``, each library with where it is
            imported, and what to declare.
    """
    entry = evaluation_entry(arguments, pipeline) if "source" in arguments else None
    path = Path(source)
    if entry is None or not path.exists():
        return
    found = _third_party_imports(path, entry, arguments)
    if not found:
        return
    if path.is_dir() and not modules_base(path)[1]:  # a project: its pyproject.toml declares
        from kfp_spot.packaging.imagepins import declared_requirements

        declared = declared_requirements(path)
        how = f"add it to [project] dependencies in {path / 'pyproject.toml'}"
    else:
        given = arguments.get("requirements") or []
        declared = list(given) if isinstance(given, list) else None
        how = ""
    if declared is None:
        return
    missing = _not_held(found, declared)
    if not missing:
        return
    names = sorted({dist for dists in missing.values() for dist in dists[:1]})
    if not how:
        listed = json.dumps([*declared, *names])
        how = set_parameter("requirements", listed)
    what = "; ".join(
        f"{top} ({where}; installed here by {', '.join(dists)})"
        for top, (where, dists) in ((t, (found[t], missing[t])) for t in sorted(missing))
    )
    raise LocalRunError(
        f"evaluation_entry_point: {entry} imports {what}, which kfp-spot's runtime image does "
        "not hold: evaluate-checkpoint runs it there after the training, with kfp-spot and its "
        "dependencies, the package and what the package declares, not the training's executor "
        f"image's libraries; declare {', '.join(names)}: {how}"
    )


def _third_party_imports(path: Path, entry: str, arguments: Mapping[str, Any]) -> dict[str, str]:
    """Top-level names of the libraries the evaluation imports, and where, first seen.

    What runs when the evaluation imports the entry point's module and calls its function: the
    module's top level (not its other functions, nor its ``if __name__ == "__main__":`` block),
    the function's body, and the top level of the modules of its own package these import. The
    standard library and the source's own modules are left out; so are imports the code is
    ready to miss and those guarded by a Python version.
    """
    from kfp_spot.packaging.imports import imported, module_file, parse, walk_own_package

    module, _, function = entry.partition(":")
    own: set[str] = {module.split(".")[0]}
    found: dict[str, str] = {}

    def read(name: str, file: Path, label: str) -> list[str]:
        if name.endswith(".__main__"):  # run by `python -m`, never by an import
            return []
        try:
            tree = parse(file.read_bytes(), str(file))
        except (OSError, SyntaxError, ValueError):  # the build or the evaluation says so
            return []
        names = imported(
            _on_import(tree, function if name == module else ""), name, file.name == "__init__.py"
        )
        for item in names:
            top = item.name.split(".")[0]
            if item.optional or item.version_guarded or top in own or top == "__future__":
                continue
            if top not in sys.stdlib_module_names:
                found.setdefault(top, f"{label}, line {item.line}")
        return [item.name for item in names]

    if path.is_file():  # a script is the one module of its package
        job = arguments.get("python_module") or path.stem
        if path.suffix == ".py" and job == module:
            read(module, path, path.name)
        return found
    base, bare = modules_base(path)
    roots = [base] if bare else list(source_roots(base))
    if not bare:
        own.update(p.stem for root in roots if root.is_dir() for p in root.iterdir())
    root = next((r for r in roots if module_file(r, module.split(".")) is not None), None)
    if root is not None:
        site = root
        walk_own_package(
            site, module, lambda name, file: read(name, file, file.relative_to(site).as_posix())
        )
    return found


def _on_import(tree: ast.Module, function: str) -> ast.Module:
    """``tree`` without what importing it does not run, but for ``function``'s body.

    Its functions' bodies (each runs only when called) and ``if __name__ == "__main__":``
    blocks (only under ``python -m``) are dropped; a class body runs, its methods' do not.
    """

    class OnImport(ast.NodeTransformer):
        def __init__(self) -> None:
            self.depth = 0

        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST | None:
            return self._function(node)

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST | None:
            return self._function(node)

        def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST | None:
            if self.depth == 0 and node.name == function:
                return node  # the evaluation calls it: what it imports runs
            return None

        def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
            self.depth += 1
            try:
                return self.generic_visit(node)
            finally:
                self.depth -= 1

        def visit_If(self, node: ast.If) -> ast.AST:
            test = node.test
            if (
                isinstance(test, ast.Compare)
                and isinstance(test.left, ast.Name)
                and test.left.id == "__name__"
                and any(
                    isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators
                )
            ):
                node.body = []
            return self.generic_visit(node)

    import copy

    kept = ast.parse("")
    visit = OnImport().visit
    kept.body = [s for s in (visit(s) for s in copy.deepcopy(tree).body) if s is not None]
    return kept


def _not_held(found: Mapping[str, str], declared: Sequence[str]) -> dict[str, list[str]]:
    """The names of ``found`` no distribution of the evaluation's environment provides.

    Each with the distributions that provide it on this machine; a name none provides here, and
    every name when a declared requirement is not installed here, is not judged.
    """
    import importlib.metadata

    from packaging.utils import canonicalize_name

    from kfp_spot import siteview
    from kfp_spot.image.lock import runtime_profile

    installed = siteview.Installed()
    held = siteview.closure(runtime_profile().package_names, installed, check_versions=False)
    wanted = siteview.closure(declared, installed)
    if wanted.missing or wanted.unreadable:
        return {}
    allowed = {**held.found, **wanted.found}
    provided = {top for dist in allowed.values() for top in _tops(dist)}
    provided.add("kfp_spot")  # the runtime image's own (an editable install lists no files)
    unsure = [top for top in found if top not in provided]
    if not unsure:
        return {}
    providers = importlib.metadata.packages_distributions()  # every distribution's: slower
    missing: dict[str, list[str]] = {}
    for top in unsure:
        dists = sorted(set(providers.get(top, [])))
        if dists and not any(canonicalize_name(d) in allowed for d in dists):
            missing[top] = dists
    return missing


def _tops(dist: Any) -> set[str]:
    """The top-level modules and packages an installed distribution provides."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return {line.strip() for line in listed.splitlines() if line.strip()}
    tops = set()
    for file in dist.files or ():
        top = file.parts[0] if file.parts else ""
        if top.endswith((".dist-info", ".data", ".pth")) or top in ("..", "__pycache__"):
            continue
        tops.add(top.split(".")[0] if len(file.parts) == 1 else top)
    return tops
