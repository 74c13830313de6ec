"""Warn about a job whose own code uses a NumPy name its executor image's NumPy lacks.

The prebuilt executor images pin an older NumPy (``sklearn-cpu.1-6``: 1.26.4) than a laptop has
today, and locally the emulator and the import check run the job with this machine's NumPy. A
name NumPy 2 added (``np.trapezoid``, ``np.concat``, ``np.linalg.vector_norm``) ran here and
failed on Vertex AI with ``AttributeError`` when that line ran: often at the end of training, in
the export or the evaluation, after the paid hours. :func:`warnings_for` reads the job's module and
the modules of its package it reaches, statically, as :mod:`kfp_spot.packaging.pycompat` does for
the image's Python.

Left alone: an image whose NumPy its record does not pin (the table has no version to compare), a
package that declares a NumPy the image's does not satisfy (pip replaces the image's NumPy on the
VM; :mod:`kfp_spot.packaging.imagepins` warns of that), and a use under a ``try`` that catches
``AttributeError`` or ``ImportError`` or under a test of ``hasattr`` or of a version
(``np.trapezoid if hasattr(np, "trapezoid") else np.trapz``), as the image's NumPy would skip it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kfp_spot import executors
from kfp_spot.packaging import imports
from kfp_spot.packaging.imagepins import unmet_pins
from kfp_spot.packaging.jobsource import JobSource, SourceFile

_ADDED = {
    (2, 0): {
        "numpy": """acos acosh asin asinh astype atan atan2 atanh bitwise_count bitwise_invert
            bitwise_left_shift bitwise_right_shift bool concat isdtype long matrix_transpose
            permute_dims pow strings trapezoid ulong unique_all unique_counts unique_inverse
            unique_values vecdot""",
        "numpy.linalg": """cross diagonal matmul matrix_norm matrix_transpose outer svdvals
            tensordot trace vecdot vector_norm""",
        "numpy.lib": "array_utils introspect",
        "numpy.dtypes": "StringDType",
        "numpy.exceptions": "RankWarning",
    },
    (2, 1): {"numpy": "cumulative_prod cumulative_sum unstack"},
    (2, 2): {"numpy": "matvec vecmat"},
}

NEW_NAMES: dict[str, tuple[int, int]] = {
    f"{module}.{name}": since
    for since, modules in _ADDED.items()
    for module, names in modules.items()
    for name in names.split()
}
"""Names of NumPy's public namespaces by the NumPy that first has them (from 2.0 on).

Read from the wheels of NumPy 1.26.4, 2.0.2, 2.1.3, 2.2.6, 2.3.5 and 2.4.6: each release's public
names (``dir()`` without ``_`` names) of ``numpy``, ``numpy.linalg``, ``numpy.lib``,
``numpy.dtypes`` and ``numpy.exceptions`` against the release before (``numpy.testing``'s left
out). ``np.bool`` and ``np.long`` are here: NumPy 1.24 removed the old aliases, 2.0 brought the
names back as scalar types. A whole new module (``numpy.strings``) is its name in its parent.
"""

OLDER_NAMES = {
    "numpy.acos": "np.arccos",
    "numpy.acosh": "np.arccosh",
    "numpy.asin": "np.arcsin",
    "numpy.asinh": "np.arcsinh",
    "numpy.atan": "np.arctan",
    "numpy.atan2": "np.arctan2",
    "numpy.atanh": "np.arctanh",
    "numpy.astype": "the array's own .astype()",
    "numpy.bitwise_invert": "np.invert",
    "numpy.bitwise_left_shift": "np.left_shift",
    "numpy.bitwise_right_shift": "np.right_shift",
    "numpy.bool": "np.bool_",
    "numpy.concat": "np.concatenate",
    "numpy.cumulative_sum": "np.cumsum",
    "numpy.cumulative_prod": "np.cumprod",
    "numpy.isdtype": "np.issubdtype",
    "numpy.long": "np.int_",
    "numpy.permute_dims": "np.transpose",
    "numpy.pow": "np.power",
    "numpy.trapezoid": "np.trapz",
    "numpy.ulong": "np.uint",
    "numpy.unique_values": "np.unique",
    "numpy.linalg.matrix_norm": "np.linalg.norm",
    "numpy.linalg.vector_norm": "np.linalg.norm",
    "numpy.linalg.matmul": "np.matmul",
    "numpy.linalg.outer": "np.outer",
    "numpy.linalg.tensordot": "np.tensordot",
    "numpy.linalg.trace": "np.trace",
    "numpy.linalg.diagonal": "np.diagonal",
    "numpy.linalg.cross": "np.cross",
    "numpy.exceptions.RankWarning": "np.RankWarning",
}
"""The name NumPy 1.26 has for the same thing, where there is one."""

_MODULES = frozenset({"numpy.linalg", "numpy.lib", "numpy.dtypes", "numpy.exceptions"})
"""NumPy's modules whose names :data:`NEW_NAMES` holds (``from numpy import linalg``)."""
_CATCHES = frozenset({"AttributeError", "ImportError", "Exception", "BaseException"})


def image_numpy(image: executors.ExecutorProfile) -> Version | None:
    """The NumPy ``image``'s record pins (``numpy==1.26.4``); None when it pins none."""
    for text in image.packages:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        clauses = list(requirement.specifier)
        if canonicalize_name(requirement.name) != "numpy" or len(clauses) != 1:
            continue
        if clauses[0].operator == "==":
            try:
                return Version(clauses[0].version.removesuffix(".*"))
            except InvalidVersion:
                return None
    return None


def _aliases(file: SourceFile) -> dict[str, str]:
    """Local name -> the NumPy module it is bound to (``np`` -> ``numpy``), from the imports."""
    out: dict[str, str] = {}
    for node in file.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "numpy" or alias.name.startswith("numpy."):
                    if alias.asname:
                        out[alias.asname] = alias.name
                    else:
                        out["numpy"] = "numpy"
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module is not None:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in _MODULES:
                    out[alias.asname or alias.name] = dotted
    return out


_TRY = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* from Python 3.11


def _word(node: ast.AST) -> str:
    """The name a ``Name`` or an ``Attribute`` ends in (``""`` for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _guarded(test: ast.expr) -> bool:
    """Whether an ``if``'s test asks whether NumPy has a name, or which version it is."""
    words = [_word(node) for node in ast.walk(test)]
    return any(word == "hasattr" or "version" in word.lower() for word in words)


def _unguarded(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``tree`` (no order), less what an image lacking a name would skip.

    A stack, not recursion: a long expression nests thousands of levels deep.
    """
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.If, ast.IfExp, ast.While)) and _guarded(node.test):
            stack.append(node.test)
        elif isinstance(node, _TRY) and imports.catches(node.handlers, _CATCHES):
            stack += [*node.handlers, *node.orelse, *node.finalbody]
        elif not (isinstance(node, ast.BoolOp) and any(map(_guarded, node.values))):
            stack += ast.iter_child_nodes(node)


def _dotted(node: ast.Attribute, aliases: dict[str, str]) -> str | None:
    """``np.linalg.vector_norm`` -> ``numpy.linalg.vector_norm``; None: not NumPy's."""
    parts = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name) or current.id not in aliases:
        return None
    return ".".join([aliases[current.id], *reversed(parts)])


def new_names_in(file: SourceFile) -> dict[str, int]:
    """Each name of :data:`NEW_NAMES` ``file`` uses where nothing guards it -> its first line."""
    aliases = _aliases(file)
    found: dict[str, int] = {}
    for node in _unguarded(file.tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute) and aliases:
            dotted = _dotted(node, aliases)
            if dotted is not None:
                names.append(dotted)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        for name in names:
            if name in NEW_NAMES:
                line = getattr(node, "lineno", 0)
                found[name] = min(found.get(name, line), line)
    return found


def _shown(name: str) -> str:
    """``numpy.linalg.vector_norm`` as code shows it: ``np.linalg.vector_norm``."""
    return "np" + name.removeprefix("numpy")


def warnings_for(
    source: JobSource,
    modules: Iterable[str],
    image: executors.ExecutorProfile,
    requirements: Iterable[str],
) -> list[str]:
    """One warning per file of the code ``modules`` reach that uses a name ``image`` lacks.

    Args:
        source: the job's code.
        modules: the modules the job runs (its module).
        image: the executor image's profile.
        requirements: the package's declared requirements (Requires-Dist).
    """
    held = image_numpy(image)
    if held is None or held.major >= 2:
        return []
    if any(canonicalize_name(p.name) == "numpy" for p in unmet_pins(requirements, image)):
        return []  # pip installs another NumPy on the VM; imagepins says so
    out: list[str] = []
    for file in source.reached_by(modules):
        lacking = {
            name: line
            for name, line in new_names_in(file).items()
            if NEW_NAMES[name] > (held.major, held.minor)
        }
        if not lacking:
            continue
        uses = "; ".join(
            f"line {line}: {_shown(name)} (NumPy {'.'.join(map(str, NEW_NAMES[name]))}"
            + (f"; before it {OLDER_NAMES[name]})" if name in OLDER_NAMES else ")")
            for name, line in sorted(lacking.items(), key=lambda item: item[1])
        )
        out.append(
            f"{file.where} uses NumPy names that executor image {image.image}'s NumPy "
            f"{held} lacks ({uses}): on Vertex AI the job fails with AttributeError when it "
            "gets there, though it runs locally with this machine's NumPy. Use the older "
            "names, or declare numpy>=2 in the package's dependencies (pip then installs a "
            "NumPy 2 at every job start)"
        )
    return out
