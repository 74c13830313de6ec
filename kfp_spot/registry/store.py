"""On-disk state of the local template registry: packages, versions (sha256) and tags.

Layout under the root (one folder per Artifact Registry repository)::

    <root>/<project>/<repo>/<package>/package.json
    <root>/<project>/<repo>/<package>/versions/<hex>.yaml   the template bytes, as uploaded
    <root>/<project>/<repo>/<package>/versions/<hex>.json   version record (times, size)
    <root>/<project>/<repo>/<package>/tags/<tag>.json       {"version": "sha256:<hex>", ...}

Ids are case-sensitive (``Latest`` and ``latest`` are two tags), disks are not all so (macOS's and
Windows' by default): the file or folder of a package or tag (projects and repositories are lower
case only, as Artifact Registry's IDs) spells each upper-case letter as ``^`` and the letter in
lower case (``tags/^latest.json`` for ``Latest``), so no two ids share one on any disk. One named
with upper-case letters, as an older version wrote them, is still read as that id.

Every file is written to a temporary name and renamed into place, and a version exists only once
its record is in place (the content is written first), so a crash never leaves a half-written
template visible. Nothing is cached in memory: a restarted server sees exactly what is on disk.

Why one module: the on-disk format and the two classes that read and write it (a repository, the
store of repositories) change together; split, the atomic-write and layout rules would be imported
back and forth.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from kfp_spot import fs, yamldocs
from kfp_spot.vertex.values import (
    ARTIFACT_REPOSITORY_ID_FORM,
    PROJECT_ID_FORM,
    InvalidValueError,
    check_artifact_repository_id,
    check_project_id,
)

VERSION_PREFIX = "sha256:"
# Project, repository, package and tag ids: one safe path segment each (matched whole: a
# trailing newline is not part of an id).
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HEX_RE = re.compile(r"[0-9a-f]{64}")
# "packages" would make `GET <host>/packages/<x>` ambiguous under KFP's default context.
RESERVED_PACKAGE_NAMES = frozenset({"packages"})
MAX_TEMPLATE_BYTES = 32 << 20


class RegistryStoreError(Exception):
    """A request the registry refuses; carries the HTTP status and google.rpc code name."""

    def __init__(self, http_status: int, status: str, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.status = status
        self.message = message


def _invalid(message: str) -> RegistryStoreError:
    return RegistryStoreError(400, "INVALID_ARGUMENT", message)


def _not_found(message: str) -> RegistryStoreError:
    return RegistryStoreError(404, "NOT_FOUND", message)


def _not_text(kind: str, value: object) -> RegistryStoreError:
    """A Python caller's id given as another type (``push(..., version=2)``): say so."""
    return _invalid(
        f"invalid {kind} {value!r}: a {kind} is text, not {type(value).__name__} "
        f"(e.g. {str(value)!r})"
    )


def check_id(kind: str, value: str) -> str:
    """Return ``value`` when it is a valid id of ``kind``; raise INVALID_ARGUMENT otherwise."""
    if not isinstance(value, str):
        raise _not_text(kind, value)
    if _ID_RE.fullmatch(value) is None or ".." in value:
        raise _invalid(
            f"invalid {kind} {value!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def check_project(value: str) -> str:
    """Return ``value`` when Artifact Registry takes it as a repository's project; 400 otherwise.

    The local registry takes no project Artifact Registry would refuse: a repository made
    locally under ``local`` or ``My_Team`` would have no counterpart there to push to.
    """
    try:
        return check_project_id(value)  # one safe path segment: no '/', no '..'
    except InvalidValueError:
        raise _invalid(f"invalid project {value!r}: expected {PROJECT_ID_FORM}") from None


def check_repository(value: str) -> str:
    """Return ``value`` when it is an Artifact Registry repository ID; 400 otherwise."""
    try:
        return check_id("repository", check_artifact_repository_id(value))
    except InvalidValueError:
        raise _invalid(
            f"invalid repository {value!r}: expected {ARTIFACT_REPOSITORY_ID_FORM}"
        ) from None


def check_version(value: str) -> str:
    """Return the hex digest of a ``sha256:<hex>`` version; raise INVALID_ARGUMENT otherwise."""
    if not isinstance(value, str):
        raise _not_text("version", value)
    hex_digest = value[len(VERSION_PREFIX) :] if value.startswith(VERSION_PREFIX) else ""
    if _HEX_RE.fullmatch(hex_digest) is None:
        raise _invalid(f"invalid version {value!r}: expected 'sha256:' and 64 lowercase hex digits")
    return hex_digest


def check_tag(value: str) -> str:
    """Return ``value`` when it is a valid tag (not a version); raise INVALID_ARGUMENT otherwise."""
    if isinstance(value, str) and value.startswith(VERSION_PREFIX):
        raise _invalid(f"invalid tag {value!r}: a tag must not start with {VERSION_PREFIX!r}")
    return check_id("tag", value)


def file_stem(name: str) -> str:
    """The file or folder name of an id: the same letters on a case-insensitive disk.

    An upper-case letter is ``^`` and the letter in lower case (``^latest`` for ``Latest``); ``^``
    is no character of an id, so :func:`name_of_file_stem` reads every name back unchanged.
    """
    return "".join(f"^{c.lower()}" if "A" <= c <= "Z" else c for c in name)


def name_of_file_stem(stem: str) -> str:
    """The id whose file is ``stem`` (an upper-case letter left as is: an older file's)."""
    return re.sub(r"\^([a-z])", lambda m: m.group(1).upper(), stem)


def _entry(parent: Path, name: str, suffix: str = "") -> Path:
    """Where the id ``name`` is (or will be written) in ``parent``: ``file_stem(name) + suffix``.

    An entry an older version named with the id's upper-case letters keeps being that id's, on a
    disk that tells the cases apart (its exact name must be listed: on one that does not,
    ``LATEST.json`` would find ``latest.json``).
    """
    legacy = f"{name}{suffix}"
    if name != name.lower() and parent.is_dir() and legacy in os.listdir(parent):
        return parent / legacy
    return parent / f"{file_stem(name)}{suffix}"


def _tag_path(folder: Path, tag: str) -> Path:
    """The file of ``tag`` in the package ``folder``."""
    return _entry(folder / "tags", tag, ".json")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_atomic(path: Path, data: bytes) -> None:
    fs.atomic_write(str(path), data)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    _write_atomic(path, json.dumps(doc, indent=1, sort_keys=True).encode())


def _read_json(path: Path, **fields: type) -> dict[str, Any]:
    """A state file this store wrote: a JSON object holding ``fields`` (name=type).

    Raises:
        ValueError: naming the file, when it is not JSON, not an object, or lacks a field (a
            file edited by hand); the server answers 500 with it instead of dropping the
            connection, which a client took for a registry that is not running.
    """
    with open(path, "rb") as handle:
        try:
            doc = json.loads(handle.read())
        except ValueError as exc:
            raise ValueError(f"{path} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} holds {type(doc).__name__} JSON, not an object")
    for name, kind in fields.items():
        if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
            raise ValueError(f"{path} has no {kind.__name__} {name!r}")
    return cast("dict[str, Any]", doc)


def pipeline_name(content: bytes) -> str:
    """The package name of a compiled template: its ``pipelineInfo.name``.

    Raises:
        RegistryStoreError: INVALID_ARGUMENT when the bytes are not a compiled KFP template.
    """
    try:
        first = yamldocs.first_document(content)
    except yaml.YAMLError as exc:
        # One line: PyYAML's message spans lines (a caret under a quoted excerpt), which a
        # client prints as the registry's reason after "answered 400".
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _invalid(f"the uploaded file is not YAML: {problem}{at}") from exc
    name = None
    if isinstance(first, dict) and isinstance(first.get("pipelineInfo"), dict):
        name = first["pipelineInfo"].get("name")
    if not isinstance(name, str) or not name:
        raise _invalid(
            "the uploaded file is not a compiled KFP template: it has no pipelineInfo.name "
            "(compile it with kfp.compiler.Compiler)"
        )
    if name in RESERVED_PACKAGE_NAMES:
        raise _invalid(f"pipeline name {name!r} is reserved by the registry protocol; rename it")
    return check_id("pipeline name", name)


@dataclass(frozen=True)
class Repository:
    """One repository (``<project>/<repo>``) of the registry, on disk."""

    root: Path
    project: str
    repo: str
    location: str = "local"

    # -- names, as Artifact Registry spells them -----------------------------------------------
    @property
    def resource(self) -> str:
        """``projects/P/locations/L/repositories/R``."""
        return f"projects/{self.project}/locations/{self.location}/repositories/{self.repo}"

    def package_resource(self, package: str) -> str:
        """Resource name of ``package``."""
        return f"{self.resource}/packages/{package}"

    def version_resource(self, package: str, hex_digest: str) -> str:
        """Resource name of a version."""
        return f"{self.package_resource(package)}/versions/{VERSION_PREFIX}{hex_digest}"

    def tag_resource(self, package: str, tag: str) -> str:
        """Resource name of a tag."""
        return f"{self.package_resource(package)}/tags/{tag}"

    # -- paths ---------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The repository folder."""
        return self.root / check_project(self.project) / check_repository(self.repo)

    def _package_dir(self, package: str) -> Path:
        return _entry(self.path, check_id("package", package))

    def _require_repository(self) -> Path:
        """The repository folder; NOT_FOUND for a repository never created, to read or to push to.

        Artifact Registry answers so: a misspelt PROJECT/REPO is not an empty repository, and a
        push does not create one (``gcloud artifacts repositories create`` does).
        """
        if not self.path.is_dir():
            raise _not_found(
                f"repository {self.resource} not found: check PROJECT/REPO in the host, or create "
                f"it (`kfp-spot registry serve --repository {self.project}/{self.repo}`; on "
                f"Artifact Registry `gcloud artifacts repositories create {self.repo} "
                "--repository-format=kfp --location=LOCATION`)"
            )
        return self.path

    def _require_package(self, package: str) -> Path:
        folder = self._package_dir(package)  # an invalid name is refused first
        self._require_repository()
        if not (folder / "package.json").is_file():
            raise _not_found(f"package {package!r} not found in {self.resource}")
        return folder

    # -- reads ---------------------------------------------------------------------------------
    def package_names(self) -> list[str]:
        """Every package of the repository, sorted."""
        folder = self._require_repository()
        return sorted(
            name_of_file_stem(p.name) for p in folder.iterdir() if (p / "package.json").is_file()
        )

    def get_package(self, package: str) -> dict[str, Any]:
        """The Package resource."""
        record = _read_json(
            self._require_package(package) / "package.json", createTime=str, updateTime=str
        )
        return {
            "name": self.package_resource(package),
            "displayName": package,
            "createTime": record["createTime"],
            "updateTime": record["updateTime"],
        }

    def list_packages(self) -> list[dict[str, Any]]:
        """Every Package resource."""
        return [self.get_package(name) for name in self.package_names()]

    def _tags(self, package: str) -> dict[str, str]:
        """Tag -> hex digest."""
        folder = self._require_package(package) / "tags"
        if not folder.is_dir():
            return {}
        out = {}
        for path in sorted(folder.glob("*.json")):
            out[name_of_file_stem(path.stem)] = check_version(
                _read_json(path, version=str)["version"]
            )
        return out

    def _version_hexes(self, package: str) -> list[str]:
        folder = self._require_package(package) / "versions"
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.json") if p.with_suffix(".yaml").is_file())

    def _version_doc(self, package: str, hex_digest: str, tags: dict[str, str]) -> dict[str, Any]:
        path = self._require_package(package) / "versions" / f"{hex_digest}.json"
        if not path.is_file():
            raise _not_found(f"version {VERSION_PREFIX}{hex_digest} of {package!r} not found")
        record = _read_json(path, createTime=str, updateTime=str, sizeBytes=int)
        return {
            "name": self.version_resource(package, hex_digest),
            "createTime": record["createTime"],
            "updateTime": record["updateTime"],
            "relatedTags": [
                {
                    "name": self.tag_resource(package, tag),
                    "version": self.version_resource(package, h),
                }
                for tag, h in sorted(tags.items())
                if h == hex_digest
            ],
            "metadata": {"sizeBytes": str(record["sizeBytes"]), "pipelineName": package},
        }

    def get_version(self, package: str, version: str) -> dict[str, Any]:
        """The Version resource (with its tags)."""
        return self._version_doc(package, check_version(version), self._tags(package))

    def list_versions(self, package: str) -> list[dict[str, Any]]:
        """Every Version resource of ``package``, oldest first."""
        tags = self._tags(package)
        docs = [self._version_doc(package, h, tags) for h in self._version_hexes(package)]
        return sorted(docs, key=lambda d: (d["createTime"], d["name"]))

    def _tag_doc(self, package: str, tag: str, hex_digest: str) -> dict[str, Any]:
        return {
            "name": self.tag_resource(package, tag),
            "version": self.version_resource(package, hex_digest),
        }

    def get_tag(self, package: str, tag: str) -> dict[str, Any]:
        """The Tag resource."""
        check_tag(tag)
        tags = self._tags(package)
        if tag not in tags:
            raise _not_found(f"tag {tag!r} of package {package!r} not found")
        return self._tag_doc(package, tag, tags[tag])

    def list_tags(self, package: str) -> list[dict[str, Any]]:
        """Every Tag resource of ``package``, by name."""
        return [self._tag_doc(package, t, h) for t, h in sorted(self._tags(package).items())]

    def resolve(self, package: str, ref: str) -> str:
        """The hex digest a version (``sha256:...``) or tag refers to."""
        if ref.startswith(VERSION_PREFIX):
            hex_digest = check_version(ref)
            if hex_digest not in self._version_hexes(package):
                raise _not_found(f"version {ref} of package {package!r} not found")
            return hex_digest
        check_tag(ref)
        tags = self._tags(package)
        if ref not in tags:
            raise _not_found(f"tag {ref!r} of package {package!r} not found")
        return tags[ref]

    def read_template(self, package: str, ref: str) -> bytes:
        """The template bytes of a version or tag, exactly as uploaded."""
        hex_digest = self.resolve(package, ref)
        return (self._package_dir(package) / "versions" / f"{hex_digest}.yaml").read_bytes()


class RegistryStore:
    """All repositories under one root; writes are serialised by a lock."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def repository(self, project: str, repo: str, location: str = "local") -> Repository:
        """The repository ``project/repo`` (validated; it need not exist yet)."""
        return Repository(self.root, check_project(project), check_repository(repo), location)

    def unserved_folders(self) -> list[str]:
        """The repository folders of the root that no request reaches, one line each with why.

        A root an older kfp-spot wrote may hold repositories under names Artifact Registry
        refuses (``local/templates``, the default then): they stay on disk, untouched, and each
        is named with the move that serves it again rather than left looking lost.
        """
        lines = []
        for project in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for repo in sorted(r for r in project.iterdir() if r.is_dir()):
                try:
                    self.repository(project.name, repo.name)
                except RegistryStoreError as exc:
                    lines.append(
                        f"{repo} is not served ({exc.message}); move it to "
                        f"{self.root}/PROJECT/REPO to serve it"
                    )
        return lines

    def create_repository(self, project: str, repo: str) -> Repository:
        """Create the repository ``project/repo`` if it is not there yet; returns it."""
        repository = self.repository(project, repo)
        repository.path.mkdir(parents=True, exist_ok=True)
        return repository

    # -- writes ----------------------------------------------------------------------------------
    def upload(self, repo: Repository, content: bytes, tags: list[str]) -> tuple[str, str]:
        """Store a template and point ``tags`` at it (moving them if they pointed elsewhere).

        Returns:
            ``(package_name, "sha256:<hex>")``.
        """
        if not content:
            raise _invalid("the uploaded file is empty")
        if len(content) > MAX_TEMPLATE_BYTES:
            raise RegistryStoreError(
                413, "INVALID_ARGUMENT", f"template is larger than {MAX_TEMPLATE_BYTES} bytes"
            )
        package = pipeline_name(content)
        tags = [check_tag(t) for t in tags]
        hex_digest = hashlib.sha256(content).hexdigest()
        repo._require_repository()  # a push creates no repository, as on Artifact Registry
        with self._lock:
            folder = repo._package_dir(package)
            now = _now()
            versions = folder / "versions"
            blob = versions / f"{hex_digest}.yaml"
            record = versions / f"{hex_digest}.json"
            if not record.is_file():
                _write_atomic(blob, content)  # content first: a version exists once its record does
                _write_json(
                    record, {"createTime": now, "updateTime": now, "sizeBytes": len(content)}
                )
            package_json = folder / "package.json"
            created = (
                _read_json(package_json, createTime=str)["createTime"]
                if package_json.is_file()
                else now
            )
            _write_json(package_json, {"createTime": created, "updateTime": now})
            for tag in tags:
                self._put_tag(folder, tag, hex_digest)
        return package, f"{VERSION_PREFIX}{hex_digest}"

    @staticmethod
    def _put_tag(folder: Path, tag: str, hex_digest: str) -> None:
        path = _tag_path(folder, tag)
        now = _now()
        created = _read_json(path).get("createTime", now) if path.is_file() else now
        _write_json(
            path,
            {"version": f"{VERSION_PREFIX}{hex_digest}", "createTime": created, "updateTime": now},
        )

    def _version_of_body(self, repo: Repository, package: str, version_name: str) -> str:
        """Hex digest of the version a Tag body names (a resource name or a bare version)."""
        if not isinstance(version_name, str) or not version_name:
            raise _invalid("the tag's 'version' field is required (a version resource name)")
        owner, _, bare = version_name.rpartition("/versions/")
        if owner and not owner.endswith(f"packages/{package}"):
            raise _invalid(f"version {version_name!r} does not belong to package {package!r}")
        hex_digest = check_version(bare if owner else version_name)
        if hex_digest not in repo._version_hexes(package):
            raise _not_found(
                f"version {VERSION_PREFIX}{hex_digest} of package {package!r} not found"
            )
        return hex_digest

    def create_tag(
        self, repo: Repository, package: str, tag: str, version_name: str
    ) -> dict[str, Any]:
        """Create ``tag``; ALREADY_EXISTS when it does."""
        return self._set_tag(repo, package, tag, version_name, exists=False)

    def update_tag(
        self, repo: Repository, package: str, tag: str, version_name: str
    ) -> dict[str, Any]:
        """Move an existing ``tag`` to another version; NOT_FOUND when there is none."""
        return self._set_tag(repo, package, tag, version_name, exists=True)

    def _set_tag(
        self, repo: Repository, package: str, tag: str, version_name: str, *, exists: bool
    ) -> dict[str, Any]:
        check_tag(tag)
        with self._lock:
            folder = repo._require_package(package)
            hex_digest = self._version_of_body(repo, package, version_name)
            present = _tag_path(folder, tag).is_file()
            if present and not exists:
                raise RegistryStoreError(
                    409, "ALREADY_EXISTS", f"tag {tag!r} of package {package!r} already exists"
                )
            if exists and not present:
                raise _not_found(f"tag {tag!r} of package {package!r} not found")
            self._put_tag(folder, tag, hex_digest)
        return repo.get_tag(package, tag)

    def delete_tag(self, repo: Repository, package: str, tag: str) -> None:
        """Delete ``tag`` (the version stays)."""
        check_tag(tag)
        with self._lock:
            path = _tag_path(repo._require_package(package), tag)
            if not path.is_file():
                raise _not_found(f"tag {tag!r} of package {package!r} not found")
            path.unlink()

    def delete_version(
        self, repo: Repository, package: str, version: str, *, force: bool = False
    ) -> None:
        """Delete a version; a tagged one only with ``force`` (which deletes its tags too)."""
        hex_digest = check_version(version)
        with self._lock:
            folder = repo._require_package(package)
            if hex_digest not in repo._version_hexes(package):
                raise _not_found(f"version {version} of package {package!r} not found")
            tagged = [t for t, h in repo._tags(package).items() if h == hex_digest]
            if tagged and not force:
                raise RegistryStoreError(
                    400,
                    "FAILED_PRECONDITION",
                    f"version {version} of {package!r} is tagged {', '.join(sorted(tagged))}: "
                    "delete or move the tags first, or pass force=true",
                )
            for tag in tagged:
                _tag_path(folder, tag).unlink()
            # Record first: without it the version no longer exists, whatever else remains.
            (folder / "versions" / f"{hex_digest}.json").unlink()
            (folder / "versions" / f"{hex_digest}.yaml").unlink(missing_ok=True)

    def delete_package(self, repo: Repository, package: str) -> None:
        """Delete a package with all its versions and tags."""
        with self._lock:
            folder = repo._require_package(package)
            (folder / "package.json").unlink()  # the package is gone from here on
            for sub in ("tags", "versions"):
                if (folder / sub).is_dir():
                    for path in (folder / sub).iterdir():
                        path.unlink()
                    (folder / sub).rmdir()
            folder.rmdir()
