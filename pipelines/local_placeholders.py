"""kfp.local's placeholders resolved as Vertex AI Pipelines resolves them: GCPC's, and numbers.

The launch component defaults ``project``, ``location`` and ``persistent_resource_id`` to GCPC's
placeholders (``{{$.pipeline_google_cloud_project_id}}``, ...), as GCPC's ``CustomTrainingJobOp``
does, and the pipelines default ``project`` and ``location`` to them: Vertex AI Pipelines fills
them in with the PipelineJob's project, region and persistent resource.

kfp.local fills in none of them, and cannot parse them: it resolves every string parameter value
as a possible input reference (``kfp/local/placeholder_utils.py``:
``resolve_self_references_in_executor_input`` -> ``resolve_individual_placeholder`` ->
``resolve_io_placeholders`` -> ``convert_placeholder_parts_to_path``, which indexes ``parts[1]``
of the one-part name: ``IndexError``, kfp 2.17), and a default left unpassed is such a value
(``kfp/local/executor_input_utils.py``: ``construct_executor_input`` copies the component's
default into the executor input). The components' own source spells the placeholders so that
this never happens in the command, so a task whose ``project``, ``location`` and
``persistent_resource_id`` are passed runs under plain kfp.local. While
:func:`gcp_placeholders_as_text` is active, kfp.local also passes defaults left to GCPC's
placeholders through as plain text, as a backend that does not know them would; the launcher then
settles them itself (:mod:`kfp_spot.vertex.pipeline_context`: ``local-project`` / ``us-central1``
/ no persistent resource on the local emulator, a clear error when bound for Vertex AI).

:func:`kfp_spot.pipelines.local.run` (and ``kfp-spot run``) use it; wrap your own kfp.local runs
that leave those inputs to their defaults the same way::

    from kfp_spot.pipelines.local_placeholders import gcp_placeholders_as_text

    with gcp_placeholders_as_text():
        spot_training(source="examples/trainer", api_endpoint=emulator.endpoint)

While it is active, a number put into text (an f-string of a parameter, ``f"{epochs}"``, or a
parameter inside a list, ``args=["--epochs", epochs]``) also reads as the KFP backend writes it,
not as kfp.local does: a parameter value is a protobuf ``Value`` whose numbers are doubles, and
kfp.local writes them with ``json.dumps`` (an ``int`` parameter ``3`` becomes ``"3.0"``, which
``argparse``'s ``type=int`` refuses), where the backend writes ``strconv.FormatFloat(v, 'f', -1,
64)`` (``"3"``; ``1e-05`` as ``"0.00001"``), so the training code gets the text it gets on Vertex
AI. Text, booleans, lists and dicts are left to kfp.local.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any

from kfp_spot.pipelines.local_patch import Standin
from kfp_spot.vertex.pipeline_context import GCPC_PLACEHOLDERS, number_text

# Stand-ins kfp.local's "{{$.(...)}}" pattern does not match; swapped back after it ran.
_TOKENS = {p: f"@@kfp-spot-gcpc-placeholder-{i}@@" for i, p in enumerate(GCPC_PLACEHOLDERS)}


# kfp.local's pattern of an input or output placeholder (placeholder_utils.resolve_io_placeholders)
_PLACEHOLDER = re.compile(r"\{\{\$\.(.*?)\}\}")
_PARAMETER = re.compile(r"inputs\.parameters\['([^']*)'\]")  # one parameter input, by name


def _numbers_as_text(executor_input: dict, command: str) -> str:
    """Each placeholder of a number parameter in ``command`` replaced by :func:`number_text`."""
    values = executor_input.get("inputs", {}).get("parameterValues", {})
    for placeholder in _PLACEHOLDER.findall(command):
        named = _PARAMETER.fullmatch(placeholder)
        value = values.get(named.group(1)) if named else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            command = command.replace(f"{{{{$.{placeholder}}}}}", number_text(value))
    return command


def _passing_through(resolve: Any) -> Any:
    @functools.wraps(resolve)
    def resolve_io_placeholders(executor_input: dict, command: str) -> str:
        command = _numbers_as_text(executor_input, command)
        for placeholder, token in _TOKENS.items():
            command = command.replace(placeholder, token)
        resolved = resolve(executor_input, command)
        for placeholder, token in _TOKENS.items():
            resolved = resolved.replace(token, placeholder)
        return resolved

    return resolve_io_placeholders


_STANDIN = Standin("kfp.local.placeholder_utils", "resolve_io_placeholders", _passing_through)


def gcp_placeholders_as_text() -> contextlib.AbstractContextManager[None]:
    """While active (in this process), kfp.local leaves GCPC's placeholders as they are.

    And puts numbers into text as the KFP backend does (the module's docstring).

    Re-entrant; the last exit puts kfp.local's own function back.
    """
    return _STANDIN.active()
