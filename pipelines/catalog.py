"""Every component and pipeline kfp-spot ships, and how they compile to committed YAML.

The compiled files live next to their sources (``components/<name>/component.yaml``,
``pipelines/<name>/pipeline.yaml``) so users can load them without this package
(``kfp.components.load_component_from_file``); ``tests/test_compiled_yaml.py`` fails when one is
stale.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from kfp import compiler

_ROOT = "kfp_spot"


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
    for name in ("prepare_package", "launch_spot_job", "evaluate_checkpoint", "promote_model")
)
PIPELINES: tuple[Entry, ...] = tuple(
    Entry(name, f"{_ROOT}.pipelines.{name}.pipeline", name, "pipeline.yaml")
    for name in ("spot_training", "continue_training", "evaluate_checkpoint")
)


def compile_entry(entry: Entry, output: Path) -> Path:
    """Compile one entry to ``output``; returns the path written."""
    output.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(entry.load(), package_path=str(output))
    return output


def compile_all(output_dir: str | Path | None = None) -> list[Path]:
    """Compile every component and pipeline.

    Args:
        output_dir: write ``<output_dir>/components/<name>.yaml`` and
            ``<output_dir>/pipelines/<name>.yaml``; None writes the committed files in place.

    Returns:
        The paths written.
    """
    written = []
    for kind, entries in (("components", COMPONENTS), ("pipelines", PIPELINES)):
        for entry in entries:
            target = (
                entry.default_path()
                if output_dir is None
                else Path(output_dir) / kind / f"{entry.name}.yaml"
            )
            written.append(compile_entry(entry, target))
    return written
