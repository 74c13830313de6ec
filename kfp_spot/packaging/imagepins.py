"""A package's declared requirements against the versions its executor image holds.

On Vertex AI, pip installs the package URIs into the executor image with their declared
dependencies. A requirement the image's own version does not satisfy (``torch>=2.5`` in
``pytorch-xla.2-4.py310``, whose torch is 2.4) fails nothing there: pip replaces the image's build
with the newest one on PyPI at every job start (for torch, a CUDA wheel of gigabytes) or stops on
a conflict with the image's other libraries. A local run does not show it: the emulator links
this machine's build when that satisfies the requirement. :func:`unmet_pins` is the one rule
(requirements and an image's profile in, findings out); prepare_package prints its findings on
its console, ``kfp-spot run`` before the run starts, and ``kfp-spot submit`` with its warnings.

Only what the image's record pins is compared: an exact version (``numpy==1.26.4``) or a series
(``torch==2.4.*``, any 2.4.x). A series is reported only when no version of it satisfies the
requirement (``torch>=2.4.1`` may hold in a 2.4 image, ``torch>=2.5`` cannot). An image the
table lacks has only its framework's version, inferred from its name, compared.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kfp_spot import executors
from kfp_spot.vmmarkers import image_environment

__all__ = [
    "UnmetPin",
    "declared_requirements",
    "unmet_pin_warnings",
    "unmet_pins",
]

_SHOWN_IMAGES = 6


@dataclass(frozen=True)
class UnmetPin:
    """A declared requirement that the version its executor image holds does not satisfy.

    Attributes:
        requirement: the requirement as declared (``torch>=2.5``).
        image: the executor image's name (``pytorch-xla.2-4.py310``).
        held: what the image holds, as its record pins it (``torch==2.4.*``).
        inferred: the image is not in kfp-spot's table; its pin is inferred from its name.
        satisfying: the images of kfp-spot's table whose version of the package satisfies it.
    """

    requirement: str
    image: str
    held: str
    inferred: bool
    satisfying: tuple[str, ...]

    @property
    def name(self) -> str:
        """The package's name as declared."""
        return Requirement(self.requirement).name

    @property
    def version(self) -> str:
        """The image's version of the package, for people (``2.4.x``, ``1.26.4``)."""
        pin = Requirement(self.held).specifier
        text = next(iter(pin)).version
        return text[:-2] + ".x" if text.endswith(".*") else text

    @property
    def message(self) -> str:
        """The warning: the requirement, the image, the image's version and the fix."""
        source = "inferred from its name" if self.inferred else executors.TABLE
        if self.satisfying:
            shown = ", ".join(self.satisfying[:_SHOWN_IMAGES])
            more = len(self.satisfying) - _SHOWN_IMAGES
            pick = f"images of kfp-spot's table whose {self.name} does: {shown}" + (
                f" and {more} more" if more > 0 else ""
            )
        else:
            pick = (
                "none of kfp-spot's table does; a newer one of Google's naming from "
                f"{executors.IMAGES_PAGE} is accepted with a note"
            )
        return (
            f"requirement {self.requirement!r} is not satisfied by executor image {self.image}, "
            f"whose {self.name} is {self.version} ({source}): on Vertex AI pip replaces it with "
            f"a {self.name} from PyPI at every job start (a large download for a framework, or a "
            "conflict with the image's other libraries), which the local emulator does not "
            f"reproduce. Pick an executor image whose {self.name} satisfies it ({pick}), or relax "
            f"the requirement to allow {self.name} {self.version}"
        )


def _pin(requirement: str) -> tuple[str, Specifier] | None:
    """``(canonical name, the == specifier)`` of an image record's pin; None when unpinned."""
    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return None
    clauses = list(parsed.specifier)
    if len(clauses) != 1 or clauses[0].operator != "==":
        return None
    return canonicalize_name(parsed.name), clauses[0]


def pinned_version(image: executors.ExecutorProfile, distribution: str) -> Version | None:
    """The version of ``distribution`` ``image``'s record pins; None when it pins none.

    ``numpy==1.26.4`` pins 1.26.4, ``tensorflow==2.17.*`` 2.17 (read as :func:`unmet_pins` reads
    the record).
    """
    wanted = canonicalize_name(distribution)
    for name, pin in filter(None, map(_pin, image.packages)):
        if name == wanted:
            try:
                return Version(pin.version.removesuffix(".*"))
            except InvalidVersion:
                return None
    return None


def _series_candidates(series: str, specifier: SpecifierSet) -> list[Version]:
    """Versions of the series ``X.Y`` on each side of every bound ``specifier`` draws in it."""
    try:
        base = Version(series)
    except InvalidVersion:
        return []
    release = base.release
    out = [base, Version(".".join(map(str, (*release, 10**6))))]
    for clause in specifier:
        try:
            bound = Version(clause.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        if bound.epoch != base.epoch or bound.release[: len(release)] != release:
            continue
        out.append(bound)
        following = (*bound.release[:-1], bound.release[-1] + 1)
        if len(following) == len(release):  # X.Y + 1 leaves the series: one level further
            following = (*bound.release, 1)
        out.append(Version(".".join(map(str, following))))
    return out


def _admits(specifier: SpecifierSet, pin: Specifier) -> bool:
    """Whether a version the image's ``pin`` allows can satisfy ``specifier``.

    Prereleases count (pip takes an installed one that matches). An exact pin is the version;
    a series ``==X.Y.*`` admits it when a version of the series at one of the specifier's bounds,
    just past one, at the series' start or far into it satisfies it (between bounds nothing
    changes).
    """
    if not pin.version.endswith(".*"):
        try:
            return specifier.contains(pin.version, prereleases=True)
        except InvalidVersion:
            return True  # an arbitrary (===) version: not judged
    candidates = _series_candidates(pin.version[:-2], specifier)
    if not candidates:
        return True
    return any(
        pin.contains(v, prereleases=True) and specifier.contains(v, prereleases=True)
        for v in candidates
    )


@functools.cache
def _table_pins() -> tuple[tuple[str, dict[str, Specifier]], ...]:
    out = []
    for name, found in executors.profiles().items():
        pins = dict(filter(None, map(_pin, found.packages)))
        out.append((name, pins))
    return tuple(out)


def unmet_pins(requirements: Iterable[str], image: executors.ExecutorProfile) -> list[UnmetPin]:
    """Each declared requirement that the version ``image`` holds of its package cannot satisfy.

    Args:
        requirements: PEP 508 requirements (a package's Requires-Dist, or ``requirements``);
            one whose marker is false in the image (Python version, an ``extra``) is left out,
            and so is one that does not parse (its own check says so).
        image: the executor image's profile (:func:`kfp_spot.executors.profile`).

    Returns:
        One finding per requirement, in the order given; empty when every one is satisfied.
    """
    own = [p for p in map(_pin, image.packages) if p is not None]
    if not image.documented:  # only the framework's version is known from the name
        framework = (f"{image.version}.*", image.version)
        own = [(name, spec) for name, spec in own if spec.version in framework]
    pins = dict(own)
    found = []
    environment = image_environment(image.python or "3.10")
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(requirement.name)
        pin = pins.get(name)
        if pin is None or not requirement.specifier:
            continue
        if requirement.marker is not None and not _marker_holds(requirement.marker, environment):
            continue
        if _admits(requirement.specifier, pin):
            continue
        satisfying = tuple(
            other
            for other, table in _table_pins()
            if name in table and _admits(requirement.specifier, table[name])
        )
        found.append(
            UnmetPin(
                requirement=text.strip(),
                image=image.image,
                held=f"{requirement.name}{pin}",
                inferred=not image.documented,
                satisfying=satisfying,
            )
        )
    return found


def _marker_holds(marker: Marker, environment: dict[str, str]) -> bool:
    try:
        return marker.evaluate(environment)
    except (UndefinedComparison, UndefinedEnvironmentName, InvalidSpecifier, InvalidVersion):
        return True  # a marker the image's values cannot decide: compare the requirement


def unmet_pin_warnings(requirements: Iterable[str], executor_image_uri: str) -> list[str]:
    """:func:`unmet_pins`' messages for the image ``executor_image_uri`` names.

    Empty for a URI that is no prebuilt training image (its own check refuses it).
    """
    try:
        image = executors.profile(executor_image_uri)
    except executors.ExecutorImageError:
        return []
    return [finding.message for finding in unmet_pins(requirements, image)]


def declared_requirements(project: Path) -> list[str] | None:
    """``[project] dependencies`` of ``project``'s pyproject.toml, read without a build.

    None when the build alone can tell them: no pyproject.toml, dependencies declared
    ``dynamic`` (setup.py, ...), or a table that does not hold a list of text.
    """
    from kfp_spot.packaging.build import project_table

    try:
        table = project_table(project)
    except ValueError:  # not valid TOML: the build says so
        return None
    dependencies = table.get("dependencies")
    if "dependencies" in (table.get("dynamic") or ()) or not isinstance(dependencies, list):
        return None
    if not all(isinstance(d, str) for d in dependencies):
        return None
    return list(dependencies)
