"""Import the job's module in the environment its executor image would give it, before staging.

The environment is an executor-image environment (:func:`kfp_spot.envcache.create_image_env`):
the image's documented libraries, the built package and the other package URIs (the light
kfp-spot-trainer wheel among them) with their declared dependencies, nothing else from this
machine. So an import the package needs but neither declares nor gets from the image fails here,
before a paid job starts, instead of on the training VM. The modules of its own package that the
job's module imports inside a function (``def main(): from trainer import train``, so that a
usage error answers before a framework loads) are imported too (:func:`job_modules`): the job
reaches them on the VM, after its arguments. Works offline when the declared
requirements are installed here; one that is not is fetched by pip from the configured index, and
the error says so when that fails.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kfp_spot import envcache, executors
from kfp_spot.packaging import pycompat
from kfp_spot.packaging.errors import ImportCheckError

log = logging.getLogger(__name__)

IMPORT_TIMEOUT_S = 300
DEFAULT_PROVIDED: tuple[str, ...] = ()


def check_import_clean(
    wheel: Path,
    requirements: Sequence[str],
    python_module: str,
    *,
    extra_packages: Sequence[Path] = (),
    provided: Sequence[str] = DEFAULT_PROVIDED,
    work_dir: str | os.PathLike[str] | None = None,
    executor_image_uri: str = executors.DEFAULT_EXECUTOR_IMAGE,
    evaluation_module: str = "",
) -> None:
    """Import ``python_module`` from ``wheel`` in the environment of ``executor_image_uri``.

    Args:
        wheel: the built wheel.
        requirements: its declared requirements (Requires-Dist); informational, the wheel's
            metadata is what pip reads.
        python_module: the module to import (its top-level code runs, as a library import).
        extra_packages: local files of the other package URIs (the extra packages, the light
            kfp-spot-trainer wheel), installed with their dependencies as on the VM.
        provided: requirements taken as provided by the image besides its documented libraries.
        work_dir: where the environment is made (removed after); default: the system's temp dir.
        executor_image_uri: the prebuilt image the job runs in.
        evaluation_module: the module of the package's evaluation entry point, imported too, in
            the environment of kfp-spot's runtime image where evaluate_checkpoint runs it (see
            :func:`check_evaluation_import`); "": none.

    Raises:
        ImportCheckError: the import fails (the traceback names the missing module), the module
            needs a newer Python than the image's (:mod:`kfp_spot.packaging.pycompat`), a package
            does not install, or the executor image is not a prebuilt one.
    """
    del requirements  # pip reads them from the wheel
    try:
        image = executors.profile(executor_image_uri)
    except executors.ExecutorImageError as exc:
        raise ImportCheckError("executor_image_uri", str(exc)) from exc
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kfp-spot-clean-env-", dir=work_dir) as tmp:
        try:
            python = envcache.create_image_env(
                Path(tmp, "env"),
                [wheel, *extra_packages],
                image,
                provided=provided,
            )
        except envcache.PackageInstallError as exc:
            raise ImportCheckError(
                "check_import",
                f"the package does not install on {image.image} (Python {image.python}): {exc}",
            ) from exc
        site = envcache.site_packages_of(python)
        found, reached = pycompat.scan(site, python_module, image.python)
        if found:
            raise ImportCheckError(
                "python_module", pycompat.explain(found, python_module, image.python, image.image)
            )
        tail = _import_tail(
            python,
            job_modules(python_module, reached),
            Path(tmp),
            "check_import",
            " (does it train at import time? guard that with `if __name__ == '__main__':`)",
        )
    if tail is not None:
        hint = ""
        if "ModuleNotFoundError" in tail:
            hint = (
                f"\nA module that is not part of the package must be declared in its "
                f"dependencies or be one of {image.image}'s libraries ("
                f"{', '.join(image.package_names)})."
            )
        raise ImportCheckError(
            "python_module",
            f"{python_module} does not import in the environment of {image.image}: its "
            f"libraries, the package and its declared dependencies:\n{tail}{hint}",
        )
    if evaluation_module:
        check_evaluation_import(wheel, evaluation_module, extra_packages, work_dir)


def check_evaluation_import(
    wheel: Path,
    module: str,
    extra_packages: Sequence[Path] = (),
    work_dir: str | os.PathLike[str] | None = None,
) -> None:
    """Import the evaluation's ``module`` where evaluate_checkpoint will: the runtime image.

    That image holds kfp-spot and its dependencies, not the executor image's libraries: a module
    importing one the package does not declare (scikit-learn, say) would fail only after the
    whole training. The modules of its package it imports inside a function (the entry point's
    ``from trainer.model import load``) are imported too, as for the job (:func:`job_modules`),
    and all are read with the image's Python first. The light kfp-spot-trainer wheel is left out
    (the image's kfp-spot serves).

    Raises:
        ImportCheckError: naming ``evaluation_entry_point``, with the import's last lines.
    """
    from kfp_spot.image.lock import runtime_profile
    from kfp_spot.packaging.trainer_dist import is_light_distribution_file

    packages = [wheel, *(p for p in extra_packages if not is_light_distribution_file(p))]
    image = runtime_profile()
    with tempfile.TemporaryDirectory(prefix="kfp-spot-eval-env-", dir=work_dir) as tmp:
        try:
            python = envcache.create_image_env(Path(tmp, "env"), packages, image)
        except envcache.PackageInstallError as exc:
            raise ImportCheckError(
                "evaluation_entry_point",
                f"the package does not install in kfp-spot's runtime image: {exc}",
            ) from exc
        # What it imports of its package inside the entry point's function runs there too.
        found, reached = pycompat.scan(envcache.site_packages_of(python), module, image.python)
        if found:
            raise ImportCheckError(
                "evaluation_entry_point",
                pycompat.explain(found, module, image.python, "kfp-spot's runtime image"),
            )
        tail = _import_tail(
            python, job_modules(module, reached), Path(tmp), "evaluation_entry_point"
        )
    if tail is not None:
        raise ImportCheckError(
            "evaluation_entry_point",
            f"{module} does not import in kfp-spot's runtime image, where evaluate_checkpoint "
            f"runs it after the training (kfp-spot and its dependencies, the package and what it "
            f"declares; not the executor image's libraries):\n{tail}\nDeclare what it imports "
            "in the package's dependencies.",
        )


def job_modules(module: str, reached: Sequence[str]) -> list[str]:
    """What the import check imports: ``module``, then the rest of ``reached``.

    ``reached``: the modules of its package that :func:`kfp_spot.packaging.pycompat.scan` read
    from it, so an import inside a function counts (the job runs it once its arguments are
    parsed); one under a ``try`` that catches ``ImportError``, ``if TYPE_CHECKING:`` or an ``if``
    on ``sys.version_info`` does not (the code is ready for it to fail). Never a ``__main__``
    module: importing it would run the job.
    """
    rest = [n for n in reached if n != module and n.rsplit(".", 1)[-1] != "__main__"]
    return [module, *rest]


# Each module in turn; a failure after the first says which module of the package it was.
_IMPORT_EACH = """\
import importlib, sys, traceback
modules = {modules!r}
for name in modules:
    try:
        importlib.import_module(name)
    except Exception:
        traceback.print_exc()
        if name != modules[0]:
            print(f"(importing {{name}}, which {{modules[0]}} imports)", file=sys.stderr)
        sys.exit(1)
"""


def _import_tail(
    python: Path, modules: Sequence[str], tmp: Path, field: str, slow_hint: str = ""
) -> str | None:
    """Import ``modules`` in turn with ``python`` from an empty directory under ``tmp``, as a job.

    Returns:
        None when they import, else the last lines of the output.

    Raises:
        ImportCheckError: naming ``field`` when the imports do not finish in time.
    """
    cwd = tmp / "cwd"
    cwd.mkdir()  # empty: the import must come from the installed package
    code = _IMPORT_EACH.format(modules=list(modules))
    try:
        proc = subprocess.run(
            [str(python), "-c", code],
            cwd=cwd,
            env=envcache.job_environ(),
            capture_output=True,
            text=True,
            timeout=IMPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImportCheckError(
            field, f"importing {modules[0]} did not finish in {IMPORT_TIMEOUT_S} s{slow_hint}"
        ) from exc
    if proc.returncode == 0:
        return None
    return "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
