"""Warn about a requirement this machine installs and Vertex AI's training VMs skip, by its marker.

A package often declares a dependency for the laptop it is written on: ``tensorflow-macos;
sys_platform == "darwin"`` on a Mac. pip reads the marker where it installs: here it installs
the dependency and the job imports it; on Vertex AI's training VMs (Linux x86_64, the executor
image's Python) the marker is false, pip skips it and the job's first import of it fails there
(and in the local emulator and the import check, whose environments take the VM's markers:
:mod:`kfp_spot.vmmarkers`). :func:`skipped_on_vertex` names such a requirement before any
environment is made, when the job's own code imports a module it provides here and nothing the
VM gets does: another declared requirement whose marker holds there, or a library of the image.
Read statically, from the job's module and the modules of its package it reaches.

The same goes for a ``requirements.txt`` beside a project's pyproject.toml, which the laptop's
environment was made from (``pip install -r requirements.txt``): pip on the VM installs the
package's declared dependencies, never that file. :func:`unread_requirements` names what it lists,
the package does not declare and the job's code imports. And a requirement that is a direct
reference to a file of this machine (``mylib @ file:///Users/alice/mylib``) installs here and
never there: :func:`local_reference` refuses it.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kfp_spot import executors, vmmarkers
from kfp_spot.packaging.jobsource import JobSource


def imported_modules(source: Path | JobSource, module: str) -> dict[str, str]:
    """Top-level modules ``module``'s own code imports (not optionally), with where first.

    ``source``: the project directory, or its :class:`JobSource` that other readers share.
    """
    found: dict[str, str] = {}
    for file in JobSource.of(source).reached(module):
        for entry in file.imported:
            if not entry.optional:
                found.setdefault(entry.name.split(".")[0], f"{file.where}, line {entry.line}")
    return found


@functools.cache
def _installed_here() -> Mapping[str, list[str]]:
    """Top-level module -> the distributions installed here that hold it.

    Read once per process, and only where a requirement needs it: it opens the metadata of every
    installed distribution (~0.3 s for a venv of ~170), which a package whose requirements all
    install on the VM alike never needs.
    """
    return importlib.metadata.packages_distributions()


def skipped_on_vertex(
    requirements: Sequence[str],
    image: executors.ExecutorProfile,
    imported: Mapping[str, str],
    *,
    here: Mapping[str, str] | None = None,
    provides: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """One warning per requirement installed here, skipped on the VM, whose module the job imports.

    Args:
        requirements: the package's declared requirements (Requires-Dist).
        image: the executor image's profile (its Python, its libraries).
        imported: top-level module -> where the job's code imports it (:func:`imported_modules`).
        here: this machine's marker values (default: this interpreter's).
        provides: top-level module -> the distributions installed here that hold it (default:
            ``importlib.metadata.packages_distributions()``).
    """
    local = vmmarkers.host_environment() if here is None else here
    chosen = vmmarkers.for_vm(requirements, vmmarkers.image_environment(image.python), local)
    on_vm = {canonicalize_name(n) for n in image.package_names}
    for text in chosen.install:
        try:
            on_vm.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue  # the build refused it already
    out = []
    for text in chosen.host_only:
        requirement = Requirement(text)
        held = _installed_here() if provides is None else provides
        name = canonicalize_name(requirement.name)
        modules = [m for m, dists in held.items() if name in map(canonicalize_name, dists)]
        modules = modules or [name.replace("-", "_")]
        missing = [
            m
            for m in sorted(modules)
            if m in imported
            and canonicalize_name(m) not in on_vm
            and not any(canonicalize_name(d) in on_vm for d in held.get(m, ()))
        ]
        if missing:
            module = missing[0]
            out.append(
                f"requirement {text!r} is installed on this machine but not on Vertex AI's "
                f"training VMs (Linux x86_64, Python {image.python}, {image.image}): its marker "
                f"is false there, so pip skips it, and {imported[module]} imports {module}, "
                "which nothing else the package declares or the image holds provides there: "
                "the job fails at that import on Vertex AI (and in the local emulator and the "
                "import check, which install what the VM installs). Declare what provides it on "
                "Linux too (a requirement whose "
                "marker holds there, e.g. 'sys_platform != \"darwin\"')"
            )
    return out


REQUIREMENTS_FILE = "requirements.txt"


def _listed(path: Path) -> list[tuple[str, Requirement]]:
    """The requirements a requirements file names (options, includes and URLs left out)."""
    out = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            out.append((line, Requirement(line)))
        except InvalidRequirement:
            continue
    return out


def unread_requirements(
    project: Path,
    declared: Sequence[str],
    image: executors.ExecutorProfile,
    job_imports: Mapping[str, str],
    evaluation_imports: Mapping[str, str],
    *,
    provides: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """A warning when ``project``'s requirements.txt lists what the package needs undeclared.

    Judged for a requirement the package does not declare whose module the job's code imports
    (and the executor image does not hold) or the evaluation's does (kfp-spot's runtime image
    holds no framework).

    Args:
        project: the project directory (a pyproject.toml, setup.py or setup.cfg at its top).
        declared: the package's declared requirements (Requires-Dist).
        image: the executor image's profile.
        job_imports: top-level module -> where the job's code imports it.
        evaluation_imports: the same for the evaluation entry point's module.
        provides: top-level module -> the distributions installed here that hold it.
    """
    path = project / REQUIREMENTS_FILE
    if not path.is_file():
        return []
    names = set()
    for text in declared:
        try:
            names.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    in_image = {canonicalize_name(n) for n in image.package_names}
    missing: list[tuple[str, str]] = []
    for line, requirement in _listed(path):
        name = canonicalize_name(requirement.name)
        if name in names:
            continue
        held = _installed_here() if provides is None else provides
        modules = [m for m, dists in held.items() if name in map(canonicalize_name, dists)]
        for module in sorted(modules or [name.replace("-", "_")]):
            if module in evaluation_imports:
                missing.append((line, evaluation_imports[module]))
                break
            if module in job_imports and name not in in_image:
                missing.append((line, job_imports[module]))
                break
    if not missing:
        return []
    shown = "; ".join(f"{line!r} ({where} imports it)" for line, where in missing[:5])
    return [
        f"{REQUIREMENTS_FILE} beside the project lists what the package does not declare: "
        f"{shown}. pip on Vertex AI's training VMs and in the evaluation's image installs the "
        "package's declared dependencies, never that file, so those imports fail there: "
        "declare them in pyproject.toml's [project] dependencies (or set [project] dynamic = "
        '["dependencies"] and read the file with [tool.setuptools.dynamic] dependencies = '
        '{file = ["requirements.txt"]})'
    ]


def local_reference(requirements: Sequence[str]) -> str | None:
    """Why a declared requirement that names a file of this machine cannot install on the VM.

    None when no requirement is a ``file:`` direct reference.
    """
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.url and requirement.url.lower().startswith("file:"):
            return (
                f"the package declares {text!r}, a file of this machine: pip installs it here "
                "and in the local emulator, but on Vertex AI's training VMs and in the "
                "evaluation's image there is no such file. Build it into an archive, pass that "
                f"in extra_package_uris (it is staged with the package) and declare "
                f"{requirement.name!r} by name"
            )
    return None
