"""A job's own source, each file read and parsed once for every static reader of it.

prepare_package warns of several things it reads in the job's code (the modules it imports,
the output directories it reads from ``AIP_*``, paths of this machine, Apple's ``mps`` device),
each in the job's module and the modules of its package it reaches. :class:`JobSource` walks
those modules once per module asked for, reads and parses each file once (:func:`imports.parse
<kfp_spot.packaging.imports.parse>`, warnings silenced, a file the parser refuses skipped), and
reads its imports and its nodes once, so the readers share one reading: one ``JobSource`` per
prepare_package call (or per ``kfp-spot run`` check). A reader given a plain directory makes
its own.

The files are read when first asked for and kept as they were then: make a new ``JobSource``
to see files changed since.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kfp_spot.packaging import imports


@dataclass(frozen=True)
class SourceFile:
    """One module of the job's package, parsed.

    Attributes:
        module: its dotted name.
        path: its file.
        where: the file as the warnings name it, relative to the source (``trainer/task.py``).
        tree: its syntax tree.
        imported: what it imports (:func:`kfp_spot.packaging.imports.imported`), in order.
    """

    module: str
    path: Path
    where: str
    tree: ast.Module
    imported: tuple[imports.Imported, ...]

    @functools.cached_property
    def nodes(self) -> tuple[ast.AST, ...]:
        """Every node of :attr:`tree`, in ``ast.walk``'s order (walked once for all readers)."""
        return tuple(ast.walk(self.tree))


@dataclass
class JobSource:
    """The job's code under ``root`` (a project directory: its modules at the top or in ``src/``).

    Not shared between threads: one reading for the readers of one call.
    """

    root: Path
    _files: dict[Path, SourceFile | None] = field(default_factory=dict, repr=False)
    _reached: dict[str, tuple[SourceFile, ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, source: Path | JobSource) -> JobSource:
        """``source`` itself, or a new reading of the directory ``source``."""
        return source if isinstance(source, JobSource) else cls(Path(source))

    def file(self, module: str, path: Path) -> SourceFile | None:
        """The file ``path`` of ``module``, read and parsed once; None: the parser refuses it."""
        if path not in self._files:
            tree = imports.source_tree(path, str(path))
            self._files[path] = (
                None
                if tree is None
                else SourceFile(
                    module=module,
                    path=path,
                    where=path.relative_to(self.root).as_posix(),
                    tree=tree,
                    imported=tuple(imports.imported(tree, module, path.name == "__init__.py")),
                )
            )
        return self._files[path]

    def reached(self, module: str) -> tuple[SourceFile, ...]:
        """``module``'s file and those of its package it reaches, in reading order.

        As :func:`kfp_spot.packaging.imports.walk_own_package` reads them from each of the
        source roots (the top, then ``src/``); a file the parser refuses is left out, and so are
        the modules only it imports. Empty for ``""``.
        """
        if module not in self._reached:
            found: list[SourceFile] = []

            def read(name: str, path: Path) -> Iterable[str]:
                file = self.file(name, path)
                if file is None:
                    return []
                found.append(file)
                return [i.name for i in file.imported]

            for base in imports.source_roots(self.root) if module else ():
                if base.is_dir():
                    imports.walk_own_package(base, module, read)
            self._reached[module] = tuple(found)
        return self._reached[module]

    def reached_by(self, modules: Iterable[str]) -> tuple[SourceFile, ...]:
        """The files :meth:`reached` gives for each of ``modules``, each file once, in order."""
        files: dict[Path, SourceFile] = {}
        for module in modules:
            for file in self.reached(module):
                files.setdefault(file.path, file)
        return tuple(files.values())
