"""prepare_package: build, validate and stage a training package named by its content.

Why one module: prepare_package is one operation whose steps (build, check the module, check the
URIs, stage by content, add the trainer wheel) run in order on the same facts; the source kinds
(sources.py), the build (build.py) and the import check (importcheck.py) already live apart.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kfp_spot import envcache, executors, fs
from kfp_spot.packaging import build as _build
from kfp_spot.packaging import (
    imports,
    localpaths,
    newnames,
    outputdirs,
    platformdeps,
    runnable,
    taskmodule,
    trainer_dist,
    unstarted,
    wheeltags,
)
from kfp_spot.packaging.entry_points import FIELD, check_entry_point, declared_entry_point
from kfp_spot.packaging.errors import (
    ModuleNotInPackageError,
    ModuleSyntaxError,
    PackageUrisError,
    PackagingError,
)
from kfp_spot.packaging.imagepins import unmet_pin_warnings
from kfp_spot.packaging.importcheck import DEFAULT_PROVIDED, check_import_clean
from kfp_spot.packaging.jobsource import JobSource
from kfp_spot.packaging.sources import (
    DIST_NAME_FORM,
    is_distribution_name,
    is_module_name,
    materialize,
    normalize_name,
)
from kfp_spot.vertex import MAX_PACKAGE_URIS
from kfp_spot.vertex.storage import check_bucket, check_not_scheme_typo, service_uri
from kfp_spot.vertex.values import InvalidValueError

STAGING_FORM = "gs://BUCKET/PATH or a local directory"

log = logging.getLogger(__name__)

PACKAGE_SUFFIXES = (".tar.gz", ".whl", ".zip", ".tar.bz2", ".egg")


@dataclass(frozen=True)
class PackageInfo:
    """A built, validated and staged training package.

    Attributes:
        name: distribution name (as its metadata spells it).
        version: distribution version.
        sha256: hex sha256 of the sdist; also a segment of its staged URI.
        uri: staged URI of the sdist (``<staging>/<name>/<sha256>/<file>``).
        filename: the sdist's file name.
        size: bytes of the sdist.
        python_module: the module a job runs with ``python -m``.
        requirements: the package's declared dependencies (Requires-Dist).
        package_uris: what a CustomJob's ``pythonPackageSpec.packageUris`` gets: the sdist first,
            then the extra package URIs.
        cache_hit: every file was already staged; nothing was uploaded.
        wheel_uri: staged URI of the wheel when one was asked for, else "".
        wheel_sha256: its sha256, else "".
        source_kind: ``project``, ``module``, ``script`` (``+archive``, ``+gs``).
        import_checked: the module was imported in its executor image's environment before
            staging.
        kfp_spot_uri: staged URI of the light kfp-spot-trainer wheel appended to
            ``package_uris`` (the package imports ``kfp_spot``), else "".
        staged: every staged URI (the sdist, the wheel when built, the kfp-spot-trainer wheel).
        evaluation_entry_point: the package's ``[tool.kfp-spot] evaluation-entry-point``, else
            "": what evaluate_checkpoint calls when its ``entry_point`` is left empty.
    """

    name: str
    version: str
    sha256: str
    uri: str
    filename: str
    size: int
    python_module: str
    requirements: tuple[str, ...]
    package_uris: tuple[str, ...]
    cache_hit: bool
    wheel_uri: str = ""
    wheel_sha256: str = ""
    source_kind: str = "project"
    import_checked: bool = False
    kfp_spot_uri: str = ""
    staged: tuple[str, ...] = field(default=(), repr=False)
    evaluation_entry_point: str = ""

    def metadata(self) -> dict[str, Any]:
        """The package artifact's metadata (JSON types only)."""
        out = asdict(self)
        out.pop("uri")
        out.pop("staged")
        out["requirements"] = list(self.requirements)
        out["package_uris"] = list(self.package_uris)
        return out


def _check_project_name(project: Path) -> None:
    """Refuse a ``[project] name`` no build backend takes, before the build.

    The backend's own refusal is the last line of a traceback in the build's output.
    """
    name = _build.project_table(project).get("name")
    if isinstance(name, str) and not is_distribution_name(name):
        raise PackagingError(
            "source",
            f"pyproject.toml [project] name {name!r} is not a valid distribution name: "
            f"{DIST_NAME_FORM}",
        )


def _module_files(module: str) -> tuple[str, ...]:
    path = module.replace(".", "/")
    return (f"{path}.py", f"{path}/__main__.py")


def check_module(wheel: Path, facts: _build.WheelFacts, python_module: str) -> None:
    """Check that ``python_module`` is in the wheel and that its package compiles.

    Raises:
        ModuleNotInPackageError: the module is not in the package.
        ModuleSyntaxError: a module of its top-level package does not compile.
    """
    stem = python_module.replace(".", "/")
    extension = any(
        f.startswith(f"{stem}.") and f.endswith((".so", ".pyd")) and "/" not in f[len(stem) :]
        for f in facts.files
    )
    if not extension and not any(f in facts.files for f in _module_files(python_module)):
        modules = taskmodule.modules_in(facts.files)
        shown = ", ".join(modules[:20]) + (" ..." if len(modules) > 20 else "")
        raise ModuleNotInPackageError(
            "python_module",
            f"{python_module!r} is not in the built package {facts.name} {facts.version} "
            f"(it holds: {shown or 'no Python modules'}); `python -m {python_module}` would fail "
            "on the training VM",
        )
    _check_runs(wheel, facts, python_module)
    top = python_module.split(".")[0]
    for name in facts.files:
        if not name.endswith(".py") or name.split("/")[0] not in (top, f"{top}.py"):
            continue
        source = _build.read_wheel_file(wheel, name)
        try:
            compile(source, name, "exec", dont_inherit=True)
        except SyntaxError as exc:  # a null byte has no line
            where = f"{name} line {exc.lineno}" if exc.lineno else name
            raise ModuleSyntaxError(
                "source",
                f"{where}: {exc.msg} (the built package {facts.name} {facts.version} would fail "
                "to import it)",
            ) from exc
        except ValueError as exc:  # e.g. null bytes
            raise ModuleSyntaxError("source", f"{name} cannot be compiled: {exc}") from exc
        except RecursionError:  # `1 + 1 + ...` thousands of times: Python refuses it too
            raise ModuleSyntaxError(
                "source",
                f"{name} is nested too deeply for Python's compiler (the built package "
                f"{facts.name} {facts.version} would fail to import it)",
            ) from None


PYTHON_FIX = "widen its requires-python, or pass an executor_image_uri whose Python it takes"

LARGE_PACKAGE_BYTES = 64 * 2**20
"""A package installing more than this is warned of: each VM installs it at each start."""


def _large_package(wheel: Path, facts: _build.WheelFacts) -> list[str]:
    """A warning when the package installs more than :data:`LARGE_PACKAGE_BYTES`.

    It names the largest files: a data set beside the code, packaged with it, most often.
    """
    with zipfile.ZipFile(wheel) as zf:
        sizes = sorted(((i.file_size, i.filename) for i in zf.infolist()), reverse=True)
    total = sum(size for size, _ in sizes)
    if total <= LARGE_PACKAGE_BYTES:
        return []
    # The files that make it large: not the code beside them ("train.py (0 MiB)")
    large = [(size, name) for size, name in sizes[:3] if size >= 2**20] or sizes[:1]
    largest = ", ".join(f"{name} ({size / 2**20:.0f} MiB)" for size, name in large)
    return [
        f"{facts.name} {facts.version} installs {total / 2**20:.0f} MiB, the largest "
        f"{'files' if len(large) > 1 else 'file'} {largest}: every VM of the job downloads "
        "and installs it at each start, after each preemption too, and so does the "
        "evaluation; keep data sets in Cloud Storage and read them at run time"
    ]


def _console_scripts(wheel: Path, facts: _build.WheelFacts) -> dict[str, str]:
    """The wheel's console scripts, name -> ``module:function``."""
    listed = next((f for f in facts.files if f.endswith(".dist-info/entry_points.txt")), None)
    if listed is None:
        return {}
    text = _build.read_wheel_file(wheel, listed).decode("utf-8", "replace")
    return runnable.console_scripts(text)


def _module_tree(
    wheel: Path, facts: _build.WheelFacts, module: str
) -> tuple[str, ast.Module] | None:
    """``module``'s file in ``wheel`` and its syntax tree.

    None for a module with no source file there (an extension module) or one that does not
    parse (the compile check names its line).
    """
    path = next((f for f in _module_files(module) if f in facts.files), None)
    if path is None:
        return None
    try:
        return path, imports.parse(_build.read_wheel_file(wheel, path), path)
    except (SyntaxError, ValueError):
        return None


def _check_runs(wheel: Path, facts: _build.WheelFacts, python_module: str) -> None:
    """Refuse a module ``python -m`` on the VM would not run, or that would run nothing there.

    Raises:
        ModuleNotInPackageError: its top-level name is a standard module's.
        PackagingError: naming ``source``, when the package installs another module named like
            a standard one; naming ``python_module``, when it only defines functions.
    """
    shadowed = runnable.shadow_reason(python_module)
    if shadowed:
        raise ModuleNotInPackageError(
            "python_module", f"{python_module!r} would not run on the training VM: {shadowed}"
        )
    shown = runnable.shadowed_files(facts.files)
    if shown:
        raise PackagingError(
            "source", runnable.shadowed_files_reason(shown, f"{facts.name} {facts.version}")
        )
    found = _module_tree(wheel, facts, python_module)
    if found is None:
        return
    path, tree = found
    idle = runnable.idle_reason(python_module, path, tree, _console_scripts(wheel, facts))
    if idle:
        raise PackagingError("python_module", idle)


def _check_imported_job(wheel: Path, facts: _build.WheelFacts, entry_point: str) -> None:
    """Refuse an evaluation entry point in the job's module when importing it runs the job."""
    module = entry_point.partition(":")[0]
    found = _module_tree(wheel, facts, module)
    if found is None:
        return
    path, tree = found
    reason = runnable.import_reason(module, path, tree)
    if reason:
        raise PackagingError("source", f"{FIELD} {entry_point!r}: {reason}")


def check_package_uris(
    extra_package_uris: Sequence[str], executor_image_uri: str | None = None
) -> list[str]:
    """Validate the extra dependency package URIs (they must exist; with the trainer, <= 100).

    With ``executor_image_uri``, a wheel pip would refuse on its training VMs or in kfp-spot's
    runtime image, where the evaluation installs it too (built for macOS, say), is refused.

    Raises:
        PackageUrisError: naming the bad entry.
    """
    from kfp_spot.image.lock import IMAGE_PYTHON

    installers = [(IMAGE_PYTHON, "kfp-spot's runtime image, where the evaluation runs")]
    if executor_image_uri is not None:
        with contextlib.suppress(executors.ExecutorImageError):  # refused with its own message
            image = executors.profile(executor_image_uri)
            installers.insert(0, (image.python, f"the training VMs' image {image.image}"))
    if isinstance(extra_package_uris, str) or not isinstance(extra_package_uris, Sequence):
        raise PackageUrisError(
            "extra_package_uris", f"must be a list of URIs, got {type(extra_package_uris).__name__}"
        )
    total = len(extra_package_uris) + 1
    if total > MAX_PACKAGE_URIS:
        raise PackageUrisError(
            "extra_package_uris",
            f"{len(extra_package_uris)} extra packages plus the trainer make {total} package "
            f"URIs; a CustomJob takes at most {MAX_PACKAGE_URIS}: merge dependencies or install "
            "them in the executor image",
        )
    seen: set[str] = set()
    out = []
    for i, uri in enumerate(extra_package_uris):
        label = f"extra_package_uris[{i}]"
        if not isinstance(uri, str) or not uri.strip():
            raise PackageUrisError(label, f"is empty or not a string: {uri!r}")
        uri = service_uri(uri.strip())  # /gcs/BUCKET/PATH: the job gets gs://BUCKET/PATH
        if fs.is_remote(uri) and not uri.startswith("gs://"):
            raise PackageUrisError(label, f"{uri!r}: Vertex AI installs packages from gs:// only")
        if not uri.lower().endswith(PACKAGE_SUFFIXES):
            raise PackageUrisError(
                label,
                f"{uri!r} is not a package archive ({', '.join(PACKAGE_SUFFIXES)})",
            )
        if uri in seen:
            raise PackageUrisError(label, f"{uri!r} is listed twice")
        for python, where in installers:
            if reason := wheeltags.unsupported_reason(uri.rsplit("/", 1)[-1], python, where):
                raise PackageUrisError(label, reason)
        seen.add(uri)
        filesystem, path = fs.filesystem(uri)
        try:
            exists = filesystem.exists(path)
        except OSError as exc:
            raise PackageUrisError(label, f"{uri!r} cannot be checked: {exc}") from exc
        if not exists:
            raise PackageUrisError(label, f"{uri!r} does not exist")
        out.append(uri)
    return out


def _same_content(filesystem: Any, path: str, local: Path, uri: str) -> bool:
    """Whether the staged object at ``path`` holds exactly ``local``'s bytes.

    A remote object is not downloaded: its size and, when the store reports one, its MD5 decide.
    """
    info = filesystem.info(path)
    if int(info.get("size") or -1) != local.stat().st_size:
        return False
    target = fs.to_local_path(uri)
    if target is not None:
        return _build.sha256_of(Path(target)) == _build.sha256_of(local)
    remote_md5 = info.get("md5Hash")
    if not remote_md5:
        return True
    local_md5 = hashlib.md5(local.read_bytes(), usedforsecurity=False).digest()
    return base64.b64decode(remote_md5) == local_md5


def stage_file(local: Path, staging_uri: str, name: str, sha256: str) -> tuple[str, bool]:
    """Copy ``local`` to ``<staging_uri>/<name>/<sha256>/<file>`` unless it is already there.

    Returns:
        ``(uri, uploaded)``.
    """
    uri = fs.join(staging_uri, normalize_name(name), sha256, local.name)
    filesystem, path = fs.filesystem(uri)
    try:
        if filesystem.exists(path):
            if _same_content(filesystem, path, local, uri):
                return uri, False
            log.warning("%s does not match its sha256 path; uploading it again", uri)
    except OSError as exc:
        raise PackagingError("staging_uri", f"{staging_uri} cannot be read: {exc}") from exc
    target = fs.to_local_path(uri)
    try:
        if target is not None:
            # Write beside, then rename: a crash never leaves a partial file under its sha256.
            fs.atomic_write(target, local.read_bytes())
        else:
            filesystem.put_file(str(local), path)  # one object upload: whole or absent
    except OSError as exc:
        raise PackagingError("staging_uri", f"cannot write {uri}: {exc}") from exc
    return uri, True


def _wants_kfp_spot(wheel: Path, facts: _build.WheelFacts) -> bool:
    """Whether the package imports ``kfp_spot`` and does not install kfp-spot itself."""
    declared = {canonicalize_name(Requirement(r).name) for r in facts.requirements}
    if declared & {trainer_dist.FULL_DISTRIBUTION, trainer_dist.LIGHT_DISTRIBUTION}:
        return False  # it brings its own kfp-spot (from the index, on the VM)
    sources = (
        _build.read_wheel_file(wheel, name).decode("utf-8", "replace")
        for name in facts.files
        if name.endswith(".py") and ".dist-info/" not in name
    )
    return trainer_dist.mentions_kfp_spot(sources)


def staging_root(staging_uri: str) -> str:
    """``staging_uri`` as packages are staged under it, or a refusal before any request is made.

    Raises:
        PackagingError: ``staging_uri`` is empty, of another scheme, a ``gs://`` URI without a
            valid bucket, or a URI missing its ``//`` (a local folder named ``gs:``).
    """
    if not isinstance(staging_uri, str) or not staging_uri.strip():
        raise PackagingError("staging_uri", "is empty: pass a gs:// URI or a local directory")
    # /gcs/BUCKET/PATH (a task's FUSE path) is staged as gs://BUCKET/PATH: the URIs the job gets
    # are then ones Vertex AI reads (kfp_spot.vertex.storage).
    # Judged before trailing slashes go: "gs://" stripped is "gs:", a local folder of that name.
    uri = service_uri(staging_uri.strip())
    if fs.is_remote(uri) and not uri.startswith("gs://"):
        raise PackagingError("staging_uri", f"{uri}: use gs:// or a local path")
    bucket = uri[len("gs://") :].split("/", 1)[0] if uri.startswith("gs://") else None
    if bucket == "":
        raise PackagingError("staging_uri", f"{uri!r} names no bucket: give {STAGING_FORM}")
    try:
        check_not_scheme_typo(uri, STAGING_FORM)
        if bucket is not None:
            check_bucket(bucket)
    except InvalidValueError as exc:
        raise PackagingError("staging_uri", f"{uri}: {exc}" if bucket else str(exc)) from None
    return uri.rstrip("/")


def prepare_package(
    source: str,
    staging_uri: str,
    *,
    python_module: str = "",
    build_wheel: bool = False,
    extra_package_uris: Sequence[str] = (),
    check_import: bool = False,
    requirements: Sequence[str] = (),
    name: str = "",
    version: str = "",
    provided_requirements: Sequence[str] = DEFAULT_PROVIDED,
    cache_dir: str | os.PathLike[str] | None = None,
    include_kfp_spot: bool = True,
    executor_image_uri: str = executors.DEFAULT_EXECUTOR_IMAGE,
    build_cache_dir: str | os.PathLike[str] | None = None,
) -> PackageInfo:
    """Build ``source`` into a reproducible sdist, validate it and stage it by its sha256.

    Nothing is staged unless every check passes. A file already staged under the same sha256 is
    not uploaded again (``cache_hit``).

    Args:
        source: a project directory (pyproject.toml or setup.py; a setup.cfg beside), a bare
            package directory, a single ``.py`` script, or a
            ``.tar.gz``/``.tgz``/``.tar``/``.zip`` source archive; a local path or gs:// URI.
        staging_uri: the staging root (gs:// for Vertex AI, or a local path).
        python_module: the module the job runs. Required for bare packages; for scripts it
            names the module the script becomes (default: the script's name); for projects the
            default is ``[tool.kfp-spot] python-module`` or the one ``*.task``/``__main__``
            module of the package.
        build_wheel: also stage the wheel (the job still gets the sdist first).
        extra_package_uris: dependency packages the job installs after the trainer.
        check_import: import the module before staging, in the environment
            ``executor_image_uri`` gives it: the image's libraries, the package URIs and their
            declared dependencies (see :mod:`kfp_spot.packaging.importcheck`).
        requirements: dependencies of a generated project (scripts and bare packages).
        name: distribution name of a generated project.
        version: version of a generated project (default ``0.0.0+src<content digest>``).
        provided_requirements: what the executor image provides besides its documented
            libraries, for ``check_import`` (default: nothing more).
        cache_dir: where the environment of ``check_import`` is made (and removed after);
            default: the system's temporary directory.
        include_kfp_spot: when the package imports ``kfp_spot`` and does not declare kfp-spot,
            stage the light ``kfp-spot-trainer`` wheel (kfp_spot.trainer and what it imports,
            this kfp-spot's version; built once per content under
            ``envcache.default_cache_dir()``) next to it and append it to ``package_uris``, so
            the training VM can import it. False: the job gets kfp-spot some other way.
        executor_image_uri: the prebuilt training image the job runs in (checked against Vertex
            AI's list; ``check_import`` uses its profile).
        build_cache_dir: keep the built archives here by the content of the source tree and
            the build tools' versions, and reuse them for the same source (the archives are
            byte-reproducible, so a rebuild would give the same bytes); None: always build.

    Returns:
        The staged package.

    Raises:
        PackagingError: (and subclasses) naming the bad argument and the problem.
    """
    staging_uri = staging_root(staging_uri)
    problem = executors.executor_image_problem(executor_image_uri)
    if problem:
        raise PackagingError("executor_image_uri", problem)
    executors.warn_executor_image(executor_image_uri)  # not in the table, or expired: stderr
    # Jobs run elsewhere and in another working directory: stage under an absolute path.
    staging_uri = fs.to_local_path(staging_uri) or staging_uri
    extras = check_package_uris(extra_package_uris, executor_image_uri)
    with tempfile.TemporaryDirectory(prefix="kfp-spot-package-") as tmp:
        work = Path(tmp)
        tree = materialize(
            source,
            work / "source",
            python_module=python_module,
            name=name,
            version=version,
            requirements=requirements,
        )
        entry_point = declared_entry_point(tree.path)  # a typo fails before the build
        _check_project_name(tree.path)
        module = python_module or tree.python_module
        if not module:
            module = str(_build.tool_config(tree.path).get("python-module", ""))
        shown = Path(source.rstrip("/")).name
        if not module and (ambiguous := taskmodule.source_ambiguity(tree.path, shown)):
            raise PackagingError("python_module", ambiguous)  # before the build, not after
        log.info("building %s (%s)", source, tree.kind)
        builds = Path(build_cache_dir) if build_cache_dir is not None else None
        built = _build.run_build(tree.path, work / "dist", cache_dir=builds)
        if builds is not None and not built.isolated:  # the wheel the job's env would build
            envcache.remember_wheel(builds, built.sdist, built.wheel, built.asked)
        facts = _build.wheel_facts(built.wheel)
        if not module:
            module = taskmodule.default_module(facts.files) or ""
        if not module:
            raise PackagingError(
                "python_module",
                taskmodule.ambiguity(
                    facts.name,
                    taskmodule.modules_in(facts.files),
                    _console_scripts(built.wheel, facts),
                ),
            )
        if not is_module_name(module):
            raise PackagingError("python_module", f"{module!r} is not a dotted module name")
        check_module(built.wheel, facts, module)
        if local := platformdeps.local_reference(facts.requirements):
            raise PackagingError("source", local)
        if light_declared := trainer_dist.declared_by_name(facts.requirements):
            raise PackagingError("source", light_declared)
        refused = envcache.python_refusal(
            envcache.wheel_meta(built.wheel), executors.profile(executor_image_uri)
        )
        if refused:  # pip on the VM refuses it, once the job's VMs have started
            raise PackagingError(
                "source", f"{refused}: pip would refuse it on the training VM; {PYTHON_FIX}"
            )
        if entry_point:
            check_entry_point(built.wheel, facts, entry_point, tree.path)
            if entry_point.partition(":")[0] == module:
                _check_imported_job(built.wheel, facts, entry_point)
        light = None
        if include_kfp_spot and _wants_kfp_spot(built.wheel, facts):
            if len(extras) + 2 > MAX_PACKAGE_URIS:
                raise PackageUrisError(
                    "extra_package_uris",
                    f"{len(extras)} extra packages plus the trainer and the kfp-spot-trainer "
                    f"wheel make {len(extras) + 2} package URIs; a CustomJob takes at most "
                    f"{MAX_PACKAGE_URIS}: merge dependencies, or pass include_kfp_spot=False "
                    "and install kfp-spot in the job another way",
                )
            light = trainer_dist.cached_trainer_wheel(
                envcache.default_cache_dir(), scratch_dir=work / "kfp-spot-trainer"
            )
            log.info("%s imports kfp_spot: adding %s to its package URIs", facts.name, light.name)
        image = executors.profile(executor_image_uri)
        job_source = JobSource(tree.path)  # every file read and parsed once for the readers
        job_imports = platformdeps.imported_modules(job_source, module)
        evaluation_imports = platformdeps.imported_modules(
            job_source, entry_point.partition(":")[0]
        )
        # The job still runs, but pip replaces the image's version (stderr: the task's console).
        for warning in [
            *unmet_pin_warnings(facts.requirements, executor_image_uri),
            *outputdirs.warnings_for(job_source, module),
            *unstarted.warnings_for(job_source, [module]),
            *newnames.warnings_for(job_source, [module], image, facts.requirements),
            *localpaths.warnings_for(
                job_source,
                [module, entry_point.partition(":")[0]],
                script=Path(source) if tree.kind == "script" else None,  # its folder's files
            ),
            *platformdeps.skipped_on_vertex(
                facts.requirements, image, {**evaluation_imports, **job_imports}
            ),
            *platformdeps.unread_requirements(
                tree.path, facts.requirements, image, job_imports, evaluation_imports
            ),
            *_large_package(built.wheel, facts),
        ]:
            print(f"kfp-spot: warning: {warning}", file=sys.stderr, flush=True)
        if check_import:
            local_extras = [
                envcache.fetch(uri, work / "extras" / str(i)) for i, uri in enumerate(extras)
            ]
            check_import_clean(
                built.wheel,
                facts.requirements,
                module,
                extra_packages=[*local_extras, *([light] if light else [])],
                provided=provided_requirements,
                work_dir=cache_dir,
                executor_image_uri=executor_image_uri,
                evaluation_module=entry_point.partition(":")[0],
            )
        sha = _build.sha256_of(built.sdist)
        uri, uploaded = stage_file(built.sdist, staging_uri, facts.name, sha)
        staged = [uri]
        wheel_uri = wheel_sha = ""
        if build_wheel:
            wheel_sha = _build.sha256_of(built.wheel)
            wheel_uri, wheel_uploaded = stage_file(built.wheel, staging_uri, facts.name, wheel_sha)
            uploaded = uploaded or wheel_uploaded
            staged.append(wheel_uri)
        light_uri = ""
        if light is not None:
            light_uri, light_uploaded = stage_file(
                light, staging_uri, trainer_dist.LIGHT_DISTRIBUTION, _build.sha256_of(light)
            )
            uploaded = uploaded or light_uploaded
            staged.append(light_uri)
        info = PackageInfo(
            name=facts.name,
            version=facts.version,
            sha256=sha,
            uri=uri,
            filename=built.sdist.name,
            size=built.sdist.stat().st_size,
            python_module=module,
            requirements=facts.requirements,
            package_uris=(uri, *extras, *([light_uri] if light_uri else [])),
            cache_hit=not uploaded,
            wheel_uri=wheel_uri,
            wheel_sha256=wheel_sha,
            source_kind=tree.kind,
            import_checked=check_import,
            kfp_spot_uri=light_uri,
            staged=tuple(staged),
            evaluation_entry_point=entry_point,
        )
    log.info(
        "package %s %s sha256 %s %s %s",
        info.name,
        info.version,
        info.sha256,
        "already staged at" if info.cache_hit else "staged to",
        info.uri,
    )
    return info
