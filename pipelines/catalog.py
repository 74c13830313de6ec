"""Every component and pipeline kfp-spot ships, and how they compile to committed YAML.

The compiled files live next to their sources (``components/<name>/component.yaml``,
``pipelines/<name>/pipeline.yaml``) so users can load them without this package
(``kfp.components.load_component_from_file``); ``tests/test_compiled_yaml.py`` fails when one is
stale.
"""

from __future__ import annotations

import importlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kfp_spot import fs
from kfp_spot.version import RUNTIME_IMAGE, RUNTIME_IMAGE_ENV, check_image_reference, runtime_image

_ROOT = "kfp_spot"
CHECKOUT = Path(__file__).resolve().parents[1]
"""The source checkout's root, when this file is in one (installed: ``site-packages/kfp_spot``)."""


@dataclass(frozen=True)
class Entry:
    """One compilable thing: where its Python object lives and where its YAML goes."""

    name: str
    module: str  # dotted module holding the object
    attribute: str
    yaml_name: str  # component.yaml or pipeline.yaml

    def load(self):
        """Import and return the component or pipeline object."""
        return getattr(importlib.import_module(self.module), self.attribute)

    def default_path(self) -> Path:
        """The committed YAML path beside the source."""
        return Path(importlib.import_module(self.module).__file__).with_name(self.yaml_name)


COMPONENTS: tuple[Entry, ...] = tuple(
    Entry(name, f"{_ROOT}.components.{name}.component", name, "component.yaml")
    for name in (
        "prepare_package",
        "launch_spot_job",
        "evaluate_checkpoint",
        "promote_model",
        "deploy_spot_endpoint",
    )
)
PIPELINES: tuple[Entry, ...] = tuple(
    Entry(name, f"{_ROOT}.pipelines.{name}.pipeline", name, "pipeline.yaml")
    for name in (
        "spot_training",
        "continue_training",
        "evaluate_checkpoint",
        "spot_training_and_serving",
    )
)


def pipeline_path(name: str) -> Path:
    """The committed YAML of pipeline ``name`` (e.g. ``spot_training``).

    Raises:
        KeyError: naming the known pipelines when ``name`` is not one.
    """
    for entry in PIPELINES:
        if entry.name == name:
            return entry.default_path()
    raise KeyError(f"no pipeline {name!r}; known: {', '.join(e.name for e in PIPELINES)}")


def compile_entry(entry: Entry, output: Path, base_image: str | None = None) -> Path:
    """Compile one entry to ``output``; returns the path written.

    The YAML replaces ``output`` whole (:func:`kfp_spot.fs.atomic_write`): a compile that fails
    or is interrupted leaves the file it would have replaced as it was.

    Args:
        entry: what to compile.
        output: the YAML file to write.
        base_image: run every task in this image instead of this version's runtime image
            (for teams that push the image to their own registry).
    """
    from kfp import compiler  # not at import: finding a committed template needs no KFP

    with tempfile.TemporaryDirectory(prefix="kfp-spot-compile-") as scratch:
        compiled = Path(scratch) / output.name
        compiler.Compiler().compile(entry.load(), package_path=str(compiled))
        text = compiled.read_text(encoding="utf-8")
    built_with = runtime_image()
    if base_image and base_image != built_with:
        text = text.replace(f"image: {built_with}\n", f"image: {base_image}\n")
    fs.atomic_write(str(output), text)
    return output


def compile_all(output_dir: str | Path | None = None, base_image: str | None = None) -> list[Path]:
    """Compile every component and pipeline.

    Args:
        output_dir: write ``<output_dir>/components/<name>.yaml`` and
            ``<output_dir>/pipelines/<name>.yaml``; None writes the committed files in place.
        base_image: another runtime image (only with ``output_dir``: the committed files always
            name this version's image).

    Returns:
        The paths written.

    Raises:
        ValueError: ``base_image`` (or ``$KFP_SPOT_RUNTIME_IMAGE``) without ``output_dir``, or
            not an image reference; no ``output_dir`` where kfp-spot is installed rather than a
            checkout (the files in place are the installed package's).
    """
    if output_dir is None and not (CHECKOUT / "pyproject.toml").is_file():
        raise ValueError(
            "kfp-spot is installed here, not a source checkout: its YAMLs are the installed "
            "package's own files; compile with --output-dir DIR"
        )
    if output_dir is None and runtime_image() != RUNTIME_IMAGE:
        raise ValueError(
            f"{RUNTIME_IMAGE_ENV} is set: compile with --output-dir (the committed YAMLs keep "
            f"{RUNTIME_IMAGE})"
        )
    if base_image is not None:
        if output_dir is None:
            raise ValueError("base_image needs output_dir: committed YAMLs keep the default image")
        check_image_reference(base_image, "base_image")
    written = []
    for kind, entries in (("components", COMPONENTS), ("pipelines", PIPELINES)):
        for entry in entries:
            target = (
                entry.default_path()
                if output_dir is None
                else Path(output_dir) / kind / f"{entry.name}.yaml"
            )
            written.append(compile_entry(entry, target, base_image))
    return written
