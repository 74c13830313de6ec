"""Warn about a job whose own code reads Vertex AI's output directories straight from ``AIP_*``.

On Vertex AI ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` are
``gs://`` URIs; the emulator sets them to directories of this machine, because its job writes
here. So a trainer that passes the raw text to ``open()``, ``os.makedirs()`` or ``np.save()`` runs
locally and, on Vertex AI, writes into a local folder named ``gs:`` that is lost with the VM:
promote-model then finds no model, after the whole paid training. Code that imports a library
handling ``gs://`` itself (TensorFlow, fsspec/gcsfs, the Cloud Storage client, ...) or reads the
directories through ``kfp_spot.trainer`` (which maps ``gs://`` to the ``/gcs/`` mount) is left
alone. Read statically, as :mod:`kfp_spot.packaging.envreads` reads variables.
"""

from __future__ import annotations

from pathlib import Path

from kfp_spot.packaging import envreads, imports
from kfp_spot.packaging.jobsource import JobSource

OUTPUT_DIR_VARS = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")
# Top-level modules whose file I/O takes gs:// URIs (or that the code may use to write there).
GCS_CAPABLE = frozenset(
    {"tensorflow", "fsspec", "gcsfs", "google", "smart_open", "etils", "orbax", "cloudpathlib"}
)


def raw_output_dir_reads(source: Path | JobSource, module: str) -> dict[str, str]:
    """The output-directory variables ``module``'s own code reads by name, with where.

    Empty when that code imports a :data:`GCS_CAPABLE` library (it may write ``gs://`` itself).
    ``source``: the project directory, or its :class:`JobSource` that other readers share.
    """
    found: dict[str, str] = {}
    capable = False
    for file in JobSource.of(source).reached(module):
        for variable, line in envreads.names_in(file.nodes):
            if variable in OUTPUT_DIR_VARS:
                found.setdefault(variable, f"{file.where}, line {line}")
        capable = capable or any(i.name.split(".")[0] in GCS_CAPABLE for i in file.imported)
    return {} if capable else found


def job_module(source: Path, python_module: str = "") -> str:
    """The job's module as the source names it, "" when only the build can tell.

    ``python_module``, else ``[tool.kfp-spot] python-module``, else its one ``task.py`` module.
    """
    from kfp_spot.packaging.build import tool_config

    if python_module:
        return python_module
    if (source / "pyproject.toml").is_file():
        declared = tool_config(source).get("python-module")
        if isinstance(declared, str) and declared:
            return declared
    tasks = [
        ".".join(path.relative_to(base).with_suffix("").parts)
        for base in imports.source_roots(source)
        if base.is_dir()
        for path in base.glob("*/task.py")
    ]
    return tasks[0] if len(tasks) == 1 else ""


def warnings_for(source: Path | JobSource, module: str) -> list[str]:
    """One warning per variable :func:`raw_output_dir_reads` finds."""
    return [
        f"{where} reads {name} by name: on Vertex AI it is a gs:// URI (here a directory of this "
        "machine), and open(), os.makedirs() or np.save() on that text write into a local "
        "folder named 'gs:' that is lost with the VM. Read the directories with "
        "kfp_spot.trainer.output_dirs() or resolve_output_dirs() (they map gs:// to the VM's "
        "/gcs/ mount), or write with a Cloud Storage client"
        for name, where in raw_output_dir_reads(source, module).items()
    ]
