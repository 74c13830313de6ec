"""A kfp-spot task's artifact input given the wrong output of another kfp-spot task, refused.

The launch's ``package``, ``resume_from`` and the evaluation's ``checkpoint``, ``package`` are
``Input[Artifact]``: KFP passes any artifact to them, so ``checkpoint=train.outputs["model"]``
compiles and is refused only when the task reads it, after the training it waited for. Where the
output comes from another kfp-spot task (:attr:`TemplateTask.sources`, through sub-DAGs too), its
name says what it holds: a submission and a local run refuse a wrong one before anything starts,
naming the input, the output given and the one meant. An output of any other component (the
team's own, GCPC's) and a ``dsl.importer`` are not judged here.
"""

from __future__ import annotations

from kfp_spot.jobs.template_steps import input_refused
from kfp_spot.jobs.template_walk import UNKNOWN, TemplateTask

# What each kfp-spot output holds, as a refusal names it.
HOLDS = {
    ("prepare_package", "package"): "the staged training package",
    ("launch_spot_job", "checkpoint"): "the job's checkpoint directory",
    ("launch_spot_job", "model"): "the job's model directory (AIP_MODEL_DIR)",
    ("launch_spot_job", "job_report"): "the job's report (Metrics)",
    ("evaluate_checkpoint", "metrics"): "the evaluation's metrics",
    ("evaluate_checkpoint", "classification_metrics"): "the evaluation's confusion matrix",
    ("evaluate_checkpoint", "report"): "the evaluation's Markdown report",
    ("promote_model", "promoted_model"): "the promoted model's directory",
    ("deploy_spot_endpoint", "endpoint"): "the endpoint (google.VertexEndpoint)",
    ("deploy_spot_endpoint", "vertex_model"): "the uploaded Model (google.VertexModel)",
}

# (component, input) -> the kfp-spot outputs it takes, the first the one to name.
TAKES = {
    ("launch_spot_job", "package"): (("prepare_package", "package"),),
    ("launch_spot_job", "resume_from"): (("launch_spot_job", "checkpoint"),),
    ("evaluate_checkpoint", "checkpoint"): (("launch_spot_job", "checkpoint"),),
    ("evaluate_checkpoint", "package"): (("prepare_package", "package"),),
    ("deploy_spot_endpoint", "model"): (
        ("promote_model", "promoted_model"),
        ("launch_spot_job", "model"),
    ),
    ("deploy_spot_endpoint", "uploaded_model"): (("deploy_spot_endpoint", "vertex_model"),),
    ("deploy_spot_endpoint", "target_endpoint"): (("deploy_spot_endpoint", "endpoint"),),
}


def _foreign_layout(task: TemplateTask) -> bool:
    """An evaluation told to take any directory as it is (``allow_foreign_layout=True``).

    Its ``checkpoint`` may then be the launch's model directory, which the team's ``evaluate()``
    reads as its own files; a value known only at run time is given the benefit of the doubt.
    """
    allowed = task.parameters.get("allow_foreign_layout")
    return allowed is True or allowed is UNKNOWN


def check_artifact_sources(task: TemplateTask) -> None:
    """Each artifact input of ``task`` that another kfp-spot task's output gives: the right one.

    Raises:
        TemplateTaskError: naming the task, the input, the output given and the one to give.
    """
    for name, source in sorted(task.sources.items()):
        takes = TAKES.get((task.component, name))
        if not takes or not source.component or (source.component, source.output) in takes:
            continue
        # an evaluation's checkpoint given the launch's model directory, to read as it is
        as_it_is = task.component == "evaluate_checkpoint" and name == "checkpoint"
        as_it_is = as_it_is and (source.component, source.output) == ("launch_spot_job", "model")
        if as_it_is and _foreign_layout(task):
            continue
        holds = HOLDS.get((source.component, source.output), f"its {source.output!r} output")
        component, output = takes[0]
        meant = (
            f"that task's {output!r} output"
            if component == source.component
            else f"the {output!r} output of a {component} task"
        )
        hint = " (or allow_foreign_layout=True to evaluate the model directory as it is)"
        hint = hint if as_it_is else ""
        raise input_refused(
            task,
            name,
            f"is the {source.output!r} output of task {source.task!r} ({source.component}), "
            f"{holds}; give it {meant} (.outputs[{output!r}]){hint}",
        )
