"""Whether a job's own code runs on its executor image's Python, older than this machine's.

A job runs its module with the Python of its prebuilt executor image (3.10 for the current ones).
Locally the emulator and the import check run it with this machine's Python, often newer: code
that uses syntax, a standard module or a name of one that the image's Python lacks (``except*``,
``tomllib`` or ``from datetime import UTC``, 3.11; ``def f[T]()``, 3.12) ran here and failed on
its first Vertex AI run. :func:`problems` reads the job's module and the modules of its own
top-level package that it imports, statically, and says where they need a newer Python. Imports
under a ``try`` that catches ``ImportError`` or under an ``if`` on ``sys.version_info`` are left
alone, as the image's Python would skip them; so are modules of the package the job never imports.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from kfp_spot.packaging import imports

NEW_STDLIB: dict[str, tuple[int, int]] = {
    "importlib.metadata": (3, 8),
    "graphlib": (3, 9),
    "zoneinfo": (3, 9),
    "tomllib": (3, 11),
    "wsgiref.types": (3, 11),
}
"""Standard modules by the Python version that first has them (from 3.8 on)."""

_NAMES_SINCE = {
    (3, 8): """functools.cached_property typing.Literal typing.Protocol typing.TypedDict
        typing.Final math.prod math.isqrt statistics.fmean shlex.join""",
    (3, 9): "functools.cache math.lcm typing.Annotated random.randbytes",
    (3, 10): """itertools.pairwise typing.ParamSpec typing.Concatenate typing.TypeAlias
        typing.TypeGuard typing.is_typeddict contextlib.aclosing dataclasses.KW_ONLY""",
    (3, 11): """datetime.UTC enum.StrEnum enum.ReprEnum enum.verify enum.EnumCheck enum.member
        enum.nonmember enum.global_enum typing.Self typing.Never typing.LiteralString
        typing.assert_never typing.assert_type typing.reveal_type typing.Required
        typing.NotRequired typing.Unpack typing.TypeVarTuple typing.dataclass_transform
        hashlib.file_digest contextlib.chdir asyncio.TaskGroup asyncio.timeout asyncio.Runner
        operator.call logging.getLevelNamesMapping math.cbrt math.exp2""",
    (3, 12): "itertools.batched typing.override typing.TypeAliasType math.sumprod",
    (3, 13): "warnings.deprecated typing.ReadOnly typing.TypeIs copy.replace",
}

NEW_STDLIB_NAMES: dict[str, tuple[int, int]] = {
    name: since for since, names in _NAMES_SINCE.items() for name in names.split()
}
"""Names of standard modules (``from datetime import UTC``) by the Python that first has them.

The commonly imported ones only: such a name imports here and raises ``ImportError`` on the
image's older Python.
"""

OLDEST_PARSED = (3, 7)
"""The oldest grammar ``ast.parse(feature_version=...)`` knows."""


def version_tuple(python: str) -> tuple[int, int]:
    """``"3.10"`` -> ``(3, 10)``."""
    major, minor = python.split(".")[:2]
    return int(major), int(minor)


def file_problems(path: Path, where: str, python: str, module: str = "") -> list[str]:
    """Where the file ``path`` (shown as ``where``) needs a newer Python than ``python``.

    Its syntax, read with the grammar of ``python``, and the standard modules it imports where
    an older Python would not skip the import. Empty also when this machine's Python cannot parse
    it either (its own error shows when it is imported).
    """
    return _read(path, where, python, module)[0]


def _read(path: Path, where: str, python: str, module: str) -> tuple[list[str], list[str]]:
    """``(problems, the modules it imports unless an older Python would skip them)``."""
    target = version_tuple(python)
    source = path.read_text(encoding="utf-8", errors="replace")
    found: list[str] = []
    with warnings.catch_warnings():  # invalid escapes and the like: not ours to report
        warnings.simplefilter("ignore")
        try:
            tree = imports.parse(source, where)
        except SyntaxError:
            return [], []
        try:
            imports.parse(source, where, feature_version=max(target, OLDEST_PARSED))
        except SyntaxError as exc:
            found.append(f"{where}, line {exc.lineno}: {exc.msg}")
    needed = []
    for entry in imports.imported(tree, module, path.name == "__init__.py"):
        if entry.optional or entry.version_guarded:
            continue
        needed.append(entry.name)
        since = NEW_STDLIB.get(entry.name) or NEW_STDLIB_NAMES.get(entry.name)
        if since is not None and since > target:
            found.append(
                f"{where}, line {entry.line}: imports {entry.name}, which Python {python} does "
                f"not have (new in {since[0]}.{since[1]})"
            )
    return found, needed


def problems(site: Path, module: str, python: str) -> list[str]:
    """Where ``module`` (installed under ``site``) needs a newer Python than ``python``.

    Reads the module, its parent packages (``__main__`` too, for a package run with ``-m``) and,
    transitively, the modules of its own top-level package that they import.

    Args:
        site: the directory the package is installed in (site-packages, or a source tree).
        module: the job's module (``python -m module``).
        python: the executor image's Python, ``"3.10"``.

    Returns:
        One line per problem, ``"trainer/task.py, line 3: ..."``; empty when there is none.
    """
    return scan(site, module, python)[0]


def scan(site: Path, module: str, python: str) -> tuple[list[str], list[str]]:
    """:func:`problems`, and the modules it read, in reading order.

    Those are the modules of the package the job can reach: ``module``, its parents and, through
    imports at any depth (inside functions too) that an older Python would not skip, the others.
    """
    found: list[str] = []
    reached: list[str] = []

    def read(name: str, path: Path) -> list[str]:
        reached.append(name)
        lines, needed = _read(path, path.relative_to(site).as_posix(), python, name)
        found.extend(lines)
        return needed

    imports.walk_own_package(site, module, read)
    return found, reached


def explain(found: list[str], module: str, python: str, image: str) -> str:
    """The error for :func:`problems`' findings: what, where, and why it passes here."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    shown = "\n  ".join(found[:8]) + (
        f"\n  ... and {len(found) - 8} more" if len(found) > 8 else ""
    )
    return (
        f"{module} needs a newer Python than {python}, the Python of {image}: on Vertex AI it "
        f"would fail to import (this machine runs it with Python {here}):\n  {shown}\n"
        f"Write it for Python {python}, or run it on an image with a newer Python."
    )
