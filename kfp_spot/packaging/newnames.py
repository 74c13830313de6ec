"""Warn about a job whose own code uses a NumPy, scikit-learn, SciPy or pandas name an image lacks.

The prebuilt executor images pin older libraries (``sklearn-cpu.1-6``: NumPy 1.26.4, scikit-learn
1.6.1, SciPy 1.15.2, pandas 2.2.3) than a laptop has today, and locally the emulator and the import
check run the job with this machine's. A name a later release added (``np.trapezoid``,
``np.concat``, ``sklearn.metrics.d2_brier_score``) or a keyword it added (``log_loss(y_proba=...)``,
``LinearRegression(tol=...)``, ``scipy.stats.linregress(x, y, axis=0)``) ran here and failed on
Vertex AI with ``AttributeError``, ``ImportError`` or ``TypeError`` when that line ran: often at the
end of training, in the export or the evaluation, after the paid hours. :func:`warnings_for` reads
the job's module and the modules of its package it reaches, statically, as
:mod:`kfp_spot.packaging.pycompat` does for the image's Python.

Left alone: an image whose record does not pin the library (no version to compare), a package that
declares a version the image's does not satisfy (pip replaces the image's on the VM;
:mod:`kfp_spot.packaging.imagepins` warns of that), and a use under a ``try`` that catches the error
it would raise (``AttributeError`` for an attribute, ``ImportError`` for an import, ``TypeError``
for a keyword), or under a test of ``hasattr`` or of a version (``np.trapezoid if hasattr(np,
"trapezoid") else np.trapz``), as the image's library would skip it. Each table starts at the
release it was read against (NumPy 1.26, scikit-learn 1.6, SciPy 1.15, pandas 2.2): an image pinning
an older one is checked for the names added since, not for those added before.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import Version

from kfp_spot import executors
from kfp_spot.packaging import imports
from kfp_spot.packaging.imagepins import pinned_version, unmet_pins
from kfp_spot.packaging.jobsource import JobSource, SourceFile
from kfp_spot.packaging.libnames import LIBRARIES, Library, Release

_ERRORS = {"attribute": "AttributeError", "import": "ImportError", "keyword": "TypeError"}
"""What each kind of use raises where the release lacks it: a ``try`` guards it if it catches that
(or ``Exception``, ``BaseException``, everything)."""


@dataclass(frozen=True)
class Use:
    """A use of something a release added: its first line, its kind (a key of ``_ERRORS``)."""

    shown: str
    since: Release
    line: int
    kind: str
    older: str | None = None


def _bindings(file: SourceFile, root: str) -> dict[str, str]:
    """Local name -> what of ``root`` it is bound to (``np`` -> ``numpy``), from the imports."""
    out: dict[str, str] = {}
    for node in file.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == root or alias.name.startswith(f"{root}."):
                    if alias.asname:
                        out[alias.asname] = alias.name
                    else:
                        out[root] = root
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module is not None
            and (node.module == root or node.module.startswith(f"{root}."))
        ):
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* from Python 3.11


def _word(node: ast.AST) -> str:
    """The name a ``Name`` or an ``Attribute`` ends in (``""`` for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _guarded(test: ast.expr) -> bool:
    """Whether an ``if``'s test asks whether a library has a name, or which version it is."""
    words = [_word(node) for node in ast.walk(test)]
    return any(word == "hasattr" or "version" in word.lower() for word in words)


def _unguarded(tree: ast.AST, error: str) -> Iterator[ast.AST]:
    """The nodes of ``tree`` (no order), less what an image lacking a name would skip.

    Skipped: the body of a ``try`` catching ``error``, what a test of ``hasattr`` or of a version
    guards. A stack, not recursion: a long expression nests thousands of levels deep.
    """
    caught = {error, "Exception", "BaseException"}
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.If, ast.IfExp, ast.While)) and _guarded(node.test):
            stack.append(node.test)
        elif isinstance(node, _TRY) and imports.catches(node.handlers, caught):
            stack += [*node.handlers, *node.orelse, *node.finalbody]
        elif not (isinstance(node, ast.BoolOp) and any(map(_guarded, node.values))):
            stack += ast.iter_child_nodes(node)


def _dotted(node: ast.expr, bindings: dict[str, str]) -> str | None:
    """``np.linalg.vector_norm`` -> ``numpy.linalg.vector_norm``; None: not the library's."""
    parts = []
    current = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name) or current.id not in bindings:
        return None
    return ".".join([bindings[current.id], *reversed(parts)])


def _imported(node: ast.AST) -> Iterator[str]:
    """The dotted names an ``import`` or ``from`` import asks for (each module of a dotted one)."""
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        yield node.module  # from numpy.strings import upper: numpy.strings
        for alias in node.names:
            yield f"{node.module}.{alias.name}"
    elif isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            for end in range(1, len(parts) + 1):
                yield ".".join(parts[:end])


def uses_in(file: SourceFile, library: Library) -> list[Use]:
    """What ``file`` uses of ``library`` that a release after the table's first added, unguarded.

    Each name (or keyword of a callable) once, at its first line, in the order of the lines.
    """
    bindings = _bindings(file, library.root)
    if not bindings:  # every import of the library binds a name
        return []
    found: dict[str, Use] = {}

    def add(shown: str, since: Release, line: int, kind: str, older: str | None = None) -> None:
        if shown not in found or line < found[shown].line:
            found[shown] = Use(shown, since, line, kind, older)

    def name(dotted: str | None, node: ast.AST, kind: str) -> None:
        if dotted is not None and dotted in library.names:
            since, older = library.names[dotted], library.older.get(dotted)
            add(library.shown(dotted), since, getattr(node, "lineno", 0), kind, older)

    # One walk per kind of use: a try guards only the uses whose error it catches.
    for node in _unguarded(file.tree, _ERRORS["attribute"]):
        if isinstance(node, ast.Attribute):
            name(_dotted(node, bindings), node, "attribute")
    for node in _unguarded(file.tree, _ERRORS["import"]):
        for dotted in _imported(node):
            name(dotted, node, "import")
    for node in _unguarded(file.tree, _ERRORS["keyword"]):
        if isinstance(node, ast.Call):
            callee = _dotted(node.func, bindings)
            added = library.keywords.get(callee or "", {})
            for keyword in node.keywords:
                if keyword.arg is not None and keyword.arg in added:
                    shown = f"{library.shown(callee or '')}({keyword.arg}=...)"
                    older = library.older.get(f"{callee}({keyword.arg}=)")
                    add(shown, added[keyword.arg], node.lineno, "keyword", older)
    return sorted(found.values(), key=lambda use: (use.line, use.shown))


def _release(since: Release) -> str:
    return ".".join(map(str, since))


def warnings_for(
    source: JobSource,
    modules: Iterable[str],
    image: executors.ExecutorProfile,
    requirements: Iterable[str],
) -> list[str]:
    """A warning per library and file of the code ``modules`` reach: what ``image`` lacks of it.

    Args:
        source: the job's code.
        modules: the modules the job runs (its module).
        image: the executor image's profile.
        requirements: the package's declared requirements (Requires-Dist).
    """
    modules, requirements = list(modules), list(requirements)
    replaced = {canonicalize_name(p.name) for p in unmet_pins(requirements, image)}
    out: list[str] = []
    for library in LIBRARIES:
        held = pinned_version(image, library.distribution)
        if held is None or library.distribution in replaced:
            continue  # no version to compare, or pip installs another on the VM (imagepins)
        for file in source.reached_by(modules):
            lacking = [u for u in uses_in(file, library) if u.since > (held.major, held.minor)]
            if lacking:
                out.append(_warning(library, file, image, held, lacking))
    return out


def _warning(
    library: Library,
    file: SourceFile,
    image: executors.ExecutorProfile,
    held: Version,
    lacking: list[Use],
) -> str:
    title = library.title
    uses = "; ".join(
        f"line {use.line}: {use.shown} ({title} {_release(use.since)}"
        + (f"; before it {use.older})" if use.older else ")")
        for use in lacking
    )
    errors = " or ".join(sorted({_ERRORS[use.kind] for use in lacking}))
    needed = _release(max(use.since for use in lacking)).removesuffix(".0")
    return (
        f"{file.where} uses {title} names that executor image {image.image}'s {title} "
        f"{held} lacks ({uses}): on Vertex AI the job fails with {errors} when it gets there, "
        f"though it runs locally with this machine's {title}. Use what {title} {held} has, or "
        f"declare {library.distribution}>={needed} in the package's dependencies (pip then "
        f"installs a {title} {needed} at every job start)"
    )
