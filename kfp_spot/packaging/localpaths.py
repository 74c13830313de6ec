"""Warn about a job whose own code names a file of this machine: ``/Users/alice/data/train.csv``.

A trainer written on a laptop often reads its data from the laptop: a default of its argument
parser, a constant at the top of a module. Locally, the emulator runs the job on this machine and
the file is there; on Vertex AI the training VMs (and the evaluation's container) have no such
path and the job fails at its first read, after the VMs started. :func:`warnings_for` names each
text of the job's own code (its module, the evaluation entry point's and the modules of their
package they import; docstrings left out) that starts with a home or volume folder of macOS
(``/Users/``, ``/Volumes/``, its temporary ``/private/var/folders/``), a Windows user folder or
this machine's home directory, also written ``~/`` (but for a hidden folder, a cache or a config
the job makes in its own home).

The same goes for Apple's GPU: PyTorch on a Mac runs a model on the ``mps`` device, and
PyTorch on the training VMs (Linux) raises "PyTorch is not linked with support for mps devices"
at its first ``.to("mps")``. :func:`mps_uses` names each call given the ``"mps"`` device
directly (``torch.device("mps")``, ``.to("mps")``, ``add_argument("--device", default="mps")``) in
a file that never asks ``mps.is_available()`` or ``mps.is_built()``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from kfp_spot.packaging import imports
from kfp_spot.packaging.jobsource import JobSource, SourceFile

LAPTOP_PREFIXES = ("/Users/", "/Volumes/", "/private/var/folders/", "C:\\Users\\", "C:/Users/")
"""Where a path of a developer's machine starts, whatever machine this is."""


def _texts(nodes: tuple[ast.AST, ...]) -> Iterator[ast.Constant]:
    """The text constants among a file's ``nodes`` but docstrings and other bare strings."""
    bare = {
        id(node.value)
        for node in nodes
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare:
            yield node


def laptop_paths(
    source: Path | JobSource, modules: list[str], home: str | None = None
) -> dict[str, str]:
    """Each path of this machine the code of ``modules`` names -> where it first does.

    ``source``: the project directory, or its :class:`JobSource` that other readers share.
    ``home``: this machine's home directory (default: ``Path.home()``), whose paths count too,
    but ``/root``, the home of the containers the jobs run in, which they have.
    """
    mine = (home if home is not None else str(Path.home())).rstrip("/\\")
    prefixes = LAPTOP_PREFIXES + ((f"{mine}/",) if mine not in ("", "/root") else ())
    found: dict[str, str] = {}
    for file in _files(source, modules):
        for node in _texts(file.nodes):
            text = str(node.value)
            if text.startswith(prefixes) or _in_home(text):
                found.setdefault(text, f"{file.where}, line {node.lineno}")
    return found


def _in_home(text: str) -> bool:
    """Whether ``text`` is a ``~/`` path but in a hidden folder (a cache or a config made there).

    ``expanduser`` finds it in this machine's home, where the emulator runs the job; on a VM
    ``~`` is the container's home, which holds none of the developer's files.
    """
    return text.startswith(("~/", "~\\")) and not text[2:].startswith(".")


def _files(source: Path | JobSource, modules: list[str]) -> Iterator[SourceFile]:
    """Each file of ``modules`` and of their package they reach, per module in turn."""
    job = JobSource.of(source)
    for module in filter(None, modules):
        yield from job.reached(module)


def _is_mps(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value == "mps" or node.value.startswith("mps:"))
    )


def _asks_availability(nodes: tuple[ast.AST, ...]) -> bool:
    """Whether the file reads ``<...>.mps.is_available`` or ``.is_built`` (a guarded use)."""
    return any(
        isinstance(node, ast.Attribute)
        and node.attr in ("is_available", "is_built")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mps"
        for node in nodes
    )


def mps_uses(source: Path | JobSource, modules: list[str]) -> dict[str, str]:
    """Each unguarded call given the ``"mps"`` device in the code of ``modules`` -> its text."""
    found: dict[str, str] = {}
    for file in _files(source, modules):
        if _asks_availability(file.nodes):
            continue
        for node in file.nodes:
            if isinstance(node, ast.Call) and any(
                _is_mps(a) for a in [*node.args, *(k.value for k in node.keywords)]
            ):
                found.setdefault(f"{file.where}, line {node.lineno}", imports.unparsed(node.func))
    return found


def left_beside(script: Path, beside_source: JobSource | None = None) -> dict[str, str]:
    """Each file or folder beside the single script ``script`` that its code names -> where.

    A script source is packaged alone (a generated project holding the script): a ``house.csv``
    or ``data/`` beside it, which the job finds when the emulator runs it from here, is on no VM.
    A text counts when it is, as a relative path, something in the script's folder (a path
    that is not there yet, such as an output the job writes, does not). ``beside_source``: the
    reading of the script's folder :func:`imports_beside` shares (default: a new one).
    """
    folder = script.parent
    try:
        beside = {entry.name for entry in folder.iterdir()} - {script.name}
    except OSError:
        return {}
    found: dict[str, str] = {}
    for file in _files(beside_source or JobSource(folder), [script.stem]):
        for node in _texts(file.nodes):
            text = str(node.value)
            relative = text.replace("\\", "/").removeprefix("./")
            if relative.split("/")[0] in beside and _exists(folder / relative):
                found.setdefault(text, f"{file.where}, line {node.lineno}")
    return found


def _exists(path: Path) -> bool:
    """Whether ``path`` is there; False for a text no path can be (a NUL, a name too long)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def imports_beside(script: Path, beside_source: JobSource | None = None) -> dict[str, str]:
    """Each module beside the single script ``script`` that it imports -> where it does.

    The generated project holds the script alone, so ``import helpers`` of a ``helpers.py``
    beside it (found here, where the emulator runs the job) is a ModuleNotFoundError on a VM.
    ``beside_source``: as for :func:`left_beside`.
    """
    file = (beside_source or JobSource(script.parent)).file(script.stem, script)
    found: dict[str, str] = {}
    for item in file.imported if file is not None else ():
        top = item.name.split(".")[0]
        beside = (script.parent / f"{top}.py").is_file() or (script.parent / top).is_dir()
        if beside and not item.optional and top != script.stem:
            found.setdefault(top, f"{script.name}, line {item.line}")
    return found


def warnings_for(
    source: Path | JobSource,
    modules: list[str],
    home: str | None = None,
    script: Path | None = None,
) -> list[str]:
    """One warning per path :func:`laptop_paths` finds (the first five) and per ``mps`` use.

    ``script``: the single script the source is, whose folder :func:`left_beside` reads.
    """
    source = JobSource.of(source)  # one reading for both
    beside_source = JobSource(script.parent) if script else None  # one for the script's folder
    devices = [
        f"{where} gives {call}() the 'mps' device, Apple's GPU, which the training VMs (Linux) "
        'do not have: PyTorch there raises "PyTorch is not linked with support for mps '
        'devices". Pick the device at run time ("cuda" if torch.cuda.is_available(), '
        'else "mps" if torch.backends.mps.is_available(), else "cpu")'
        for where, call in list(mps_uses(source, modules).items())[:3]
    ]
    paths = [
        f"{where} names {text!r}, a path of this machine: the training VMs on Vertex AI and "
        "the evaluation's container have no such file, so the job fails there when it reads "
        "it. Put the data in Cloud Storage and pass its gs:// URI (the VM's /gcs/BUCKET/... "
        "path for plain file I/O) as a training argument"
        for text, where in list(laptop_paths(source, modules, home).items())[:5]
    ]
    beside = [
        f"{where} names {text!r}, beside the script, which is packaged alone: the training VMs "
        "on Vertex AI and the evaluation's container have no such file. Make the folder a "
        "project that ships it as package data, or put the data in Cloud Storage and pass its "
        "gs:// URI as a training argument"
        for text, where in list(left_beside(script, beside_source).items() if script else [])[:5]
    ]
    imported_beside = [
        f"{where} imports {name}, a module beside the script, which is packaged alone: the job "
        f"fails there with ModuleNotFoundError. Give the folder as the source, as a bare "
        "package (an __init__.py) or a project, so that the package holds both"
        for name, where in list(imports_beside(script, beside_source).items() if script else [])[:5]
    ]
    return devices + paths + beside + imported_beside
