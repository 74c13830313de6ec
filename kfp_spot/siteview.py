"""Views of this interpreter's installed distributions: what some requirements need, linked.

A *view* is a directory of symbolic links to exactly the installed files of a set of
distributions: put on ``sys.path`` it makes them importable and nothing else installed here. Two
parts of kfp-spot make one, with the same rules: the executor-image environments of
:mod:`kfp_spot.envcache` (a job sees what its prebuilt image and its packages provide, as on
Vertex AI) and the build hooks of :mod:`kfp_spot.buildview` (a build sees its
``[build-system] requires``, as pip's isolated build on the training VM does).

- :func:`closure`: the distributions some PEP 508 requirements need here, their own requirements
  included (markers for this interpreter, extras as asked), looked up lazily in
  :class:`Installed`: only the distributions the closure reaches are read.
- :func:`recorded_files`: what a distribution's ``RECORD`` says pip installed. Without one a
  distribution's files are not known (an ``.egg-info``'s ``SOURCES.txt`` lists what it was built
  from); each caller says what it does then.
- :func:`link`: the symbolic links. A directory is linked whole when everything in it belongs to
  the view's distributions; a directory shared with others (the ``google/`` namespace, where
  protobuf and every Google Cloud library install) becomes a real directory whose entries are
  linked by the same rule, so the view exposes its distributions' parts of it and no other.
"""

from __future__ import annotations

import csv
import os
import site
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = ["Closure", "Installed", "closure", "link", "recorded_files", "site_dirs"]

Parts = tuple[str, ...]
"""A path below a site directory, as its components (``("numpy", "__init__.py")``)."""

_BYTECODE = "__pycache__"


def site_dirs() -> list[str]:
    """This interpreter's site-packages directories that exist, in ``sys.path`` order."""
    dirs = list(site.getsitepackages())
    purelib = sysconfig.get_paths()["purelib"]
    if purelib not in dirs:
        dirs.append(purelib)
    return [d for d in dirs if os.path.isdir(d)]


class Installed:
    """The distributions installed in ``dirs`` (default: :func:`site_dirs`), by name.

    A name is looked up when first asked, and the first distribution of that name on ``dirs`` is
    the one (the one Python imports).
    """

    def __init__(self, dirs: Sequence[str] | None = None) -> None:
        self.dirs = list(site_dirs() if dirs is None else dirs)
        self._seen: dict[str, importlib_metadata.Distribution | None] = {}

    def get(self, name: str) -> importlib_metadata.Distribution | None:
        """The installed distribution ``name`` (any spelling of it), or None."""
        key = canonicalize_name(name)
        if key not in self._seen:
            found = importlib_metadata.distributions(name=name, path=self.dirs)
            self._seen[key] = next(iter(found), None)
        return self._seen[key]


@dataclass(frozen=True)
class Closure:
    """What :func:`closure` found.

    Attributes:
        found: canonical name -> the installed distribution, for every distribution needed.
        missing: the requirements not installed here (or, where versions are checked, not in a
            version that satisfies them).
        unreadable: the requirements that are not PEP 508.
    """

    found: dict[str, importlib_metadata.Distribution]
    missing: list[str]
    unreadable: list[str]


def _marker_ok(req: Requirement, extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in (*extras, ""))


def closure(
    requirements: Iterable[str], installed: Installed, *, check_versions: bool = True
) -> Closure:
    """The installed distributions ``requirements`` need, transitively.

    ``check_versions``: a requirement given here whose installed version does not satisfy its
    specifier counts as missing (pip would install another); the requirements of installed
    distributions are taken as met by what is installed (pip resolved them here).
    """
    queue: list[tuple[str, tuple[str, ...], bool]] = [
        (text, (), check_versions) for text in requirements
    ]
    found: dict[str, importlib_metadata.Distribution] = {}
    done: set[tuple[str, tuple[str, ...]]] = set()
    missing: list[str] = []
    unreadable: list[str] = []
    while queue:
        text, parent_extras, check = queue.pop()
        try:
            req = Requirement(text)
        except InvalidRequirement:
            unreadable.append(text)
            continue
        if not _marker_ok(req, parent_extras):
            continue
        dist = installed.get(req.name)
        if dist is None or (
            check and req.specifier and not req.specifier.contains(dist.version, prereleases=True)
        ):
            missing.append(text)
            continue
        name, extras = canonicalize_name(req.name), tuple(sorted(req.extras))
        if (name, extras) in done:
            continue
        done.add((name, extras))
        found.setdefault(name, dist)
        queue.extend((sub, extras, False) for sub in dist.requires or [])
    return Closure(found, sorted(set(missing)), sorted(set(unreadable)))


def recorded_files(dist: importlib_metadata.Distribution) -> list[Parts] | None:
    """The files ``dist``'s ``RECORD`` lists below its site directory; None without a RECORD.

    Bytecode is left out (it is not what was installed: Python writes it beside the sources), so
    are the files installed elsewhere (scripts in ``bin/``, data under the prefix).
    """
    text = dist.read_text("RECORD")
    if text is None:
        return None
    out = []
    for row in csv.reader(text.splitlines()):
        if not row or not row[0]:
            continue
        path = PurePosixPath(row[0])
        parts = path.parts
        if path.is_absolute() or not parts or ".." in parts or _BYTECODE in parts:
            continue
        out.append(parts)
    return out


class _Tree:
    """The listed files of the view's distributions below one site directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.children: dict[Parts, set[str]] = {}  # a directory -> its listed entries
        self.leaves: set[Parts] = set()  # what a distribution listed itself
        self._whole: dict[Parts, bool] = {}
        self.missing: list[Path] = []

    def add(self, parts: Parts) -> None:
        self.leaves.add(parts)
        for depth in range(len(parts)):
            self.children.setdefault(parts[:depth], set()).add(parts[depth])

    def whole(self, parts: Parts) -> bool:
        """Whether ``parts`` holds nothing but listed files (a listed entry itself counts whole)."""
        if parts not in self._whole:
            self._whole[parts] = self._all_listed(parts)
        return self._whole[parts]

    def _all_listed(self, parts: Parts) -> bool:
        if parts in self.leaves:
            return True
        try:
            present = {entry.name for entry in os.scandir(self.base.joinpath(*parts))}
        except (FileNotFoundError, NotADirectoryError):
            self.missing.append(self.base.joinpath(*parts))
            return False
        listed = self.children[parts]
        self.missing.extend(self.base.joinpath(*parts, n) for n in sorted(listed - present))
        clean = present - {_BYTECODE} <= listed
        # every child is checked (not only up to the first foreign one): missing entries count
        return all([self.whole((*parts, name)) for name in sorted(listed & present)]) and clean


def link(
    view: Path, listed: Iterable[tuple[importlib_metadata.Distribution, Sequence[Parts]]]
) -> list[Path]:
    """Symlink the files of distributions (``(distribution, its files)``) into ``view`` (made).

    An entry wholly of these files (a package, a module, a ``.dist-info``) is one link; a
    directory that also holds other files (a namespace shared with distributions outside the
    view) is a directory of the view whose entries are linked so, with its bytecode cache. Where
    two distributions list the same file, the first one's is linked.

    Returns:
        The listed paths that are not installed (not linked).
    """
    trees: dict[Path, _Tree] = {}
    for dist, files in listed:
        base = Path(str(dist.locate_file("")))
        tree = trees.setdefault(base, _Tree(base))
        for parts in files:
            tree.add(parts)
    view.mkdir(parents=True, exist_ok=True)
    missing: list[Path] = []
    for tree in trees.values():
        _link_into(view, tree, ())
        missing.extend(tree.missing)
    return missing


def _link_into(view: Path, tree: _Tree, parts: Parts) -> None:
    """Link the listed entries of ``tree``'s directory ``parts`` into the same place of ``view``."""
    for name in sorted(tree.children.get(parts, ())):
        entry = (*parts, name)
        source, target = tree.base.joinpath(*entry), view.joinpath(*entry)
        if not os.path.lexists(source):
            if not parts:  # deeper ones are found by the scan of their directory
                tree.missing.append(source)
            continue
        if tree.whole(entry) and not os.path.lexists(target):
            target.symlink_to(source, target_is_directory=source.is_dir())
        elif source.is_dir() and not target.is_symlink():
            target.mkdir(exist_ok=True)
            _link_into(view, tree, entry)
    if parts:
        cache, into = tree.base.joinpath(*parts, _BYTECODE), view.joinpath(*parts, _BYTECODE)
        if cache.is_dir() and not os.path.lexists(into):
            into.symlink_to(cache, target_is_directory=True)
