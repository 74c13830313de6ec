"""A compiled pipeline YAML as the component KFP's loader makes of it, read once.

``kfp.components.load_component_from_file`` parses the file with PyYAML's pure-Python loader, and
the component it returns parses it again on every read of ``pipeline_spec`` (a ``kfp-spot run`` or
``submit`` of a template reads it several times): ~50-60 ms of CPU per parse for a spec of ours.
:func:`load_template_component` takes the documents parsed once (:mod:`kfp_spot.yamldocs`) and
builds the same :class:`~kfp.dsl.yaml_component.YamlComponent`: the component spec through
KFP's ``ComponentSpec.from_ir_dicts``, the description from the compiler's ``# Description:``
header where the spec has none, and a fresh ``PipelineSpec`` message on each read, as KFP's does.
tests/test_template_component.py holds it equal to KFP's loader for every committed template.
"""

from __future__ import annotations

import copy
from typing import Any

from google.protobuf import json_format
from kfp.dsl import structures, yaml_component
from kfp.pipeline_spec import pipeline_spec_pb2

_HEADING = "# Description: "
_CONTINUATION = "#             "


class TemplateComponent(yaml_component.YamlComponent):
    """A :class:`YamlComponent` whose YAML was parsed once; ``pipeline_spec`` reads that parse."""

    def __init__(self, documents: list[dict[str, Any]], component_yaml: str) -> None:
        platform = documents[1] if len(documents) > 1 else {}
        spec = structures.ComponentSpec.from_ir_dicts(copy.deepcopy(documents[0]), platform)
        if not spec.description:
            spec.description = header_description(component_yaml)
        super().__init__(component_spec=spec, component_yaml=component_yaml)
        self._pipeline_dict = documents[0]

    @property
    def pipeline_spec(self) -> pipeline_spec_pb2.PipelineSpec:
        """A new ``PipelineSpec`` from the parsed first document (a caller may change it)."""
        return json_format.ParseDict(self._pipeline_dict, pipeline_spec_pb2.PipelineSpec())


def header_description(component_yaml: str) -> str | None:
    """The ``# Description:`` header KFP's compiler writes (third line, continued by ``#`` lines).

    The same reading as KFP's loader: only a heading on the third line counts.
    """
    lines = component_yaml.splitlines()
    if _HEADING not in component_yaml or len(lines) < 3:
        return None
    description = lines[2]
    for line in lines[3:]:
        if not line.startswith(_CONTINUATION):
            break
        description += "\n" + line[len(_CONTINUATION) + 1 :]
    return description[len(_HEADING) :]


def load_template_component(documents: list[Any], component_yaml: str) -> TemplateComponent:
    """The component of a compiled template: its parsed YAML ``documents`` and its text.

    Raises:
        ValueError: more than two documents (KFP's loader refuses them the same way), or
            what KFP raises on a spec missing or mistyping a section it needs (KeyError,
            TypeError, AttributeError).
    """
    if len(documents) > 2:
        raise ValueError(
            f"Expected one or two YAML documents in the IR YAML file. Got: {len(documents)}."
        )
    return TemplateComponent(documents, component_yaml)
