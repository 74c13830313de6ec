"""What a local run notes about the same pipeline's runs on Vertex AI Pipelines.

A local run never caches a task and never makes a PipelineJob, so two things that decide a run
on Vertex AI do not show here: a prepare-package, launch or deploy task left cacheable (a
pipeline of the loaded component YAMLs without ``.set_caching_options(False)``: the second run
on Vertex AI replays the launch's outcome without training,
:func:`kfp_spot.jobs.template_warnings.run_warnings`, which also names a launch or deploy task
given a machine of its own, which the training never gets), and a pipeline name from which the
Vertex AI SDK makes a PipelineJob ID the service refuses
(:func:`kfp_spot.vertex.pipeline_parameters.job_id_problem`). ``kfp-spot submit`` and ``push``
say so too; a team that submits with the SDK itself sees it only here.
"""

from __future__ import annotations

from typing import Any


def vertex_notes(pipeline: Any) -> list[str]:
    """The notes for ``pipeline`` (a loaded pipeline: a graph or YAML component), in order."""
    from google.protobuf import json_format

    from kfp_spot.jobs.template_warnings import run_warnings
    from kfp_spot.vertex.pipeline_parameters import job_id_problem

    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    notes = [  # each said of Vertex AI Pipelines, once
        w if "Vertex AI Pipelines" in w else f"on Vertex AI Pipelines, {w}"
        for w in run_warnings(spec)
    ]
    problem = job_id_problem(str(spec.get("pipelineInfo", {}).get("name", "")))
    if problem:
        notes.append(
            f"{problem} (kfp-spot submit refuses it, and the SDK's PipelineJob without job_id)"
        )
    return notes
