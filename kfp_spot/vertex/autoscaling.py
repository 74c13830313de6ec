"""The rules Vertex AI applies to a DeployedModel's ``dedicatedResources.autoscalingMetricSpecs``.

Each entry names a metric (required) and its target; "at most one entry is allowed per metric".
The API reference calls the target "the target resource utilization in percentage (1% - 100%)",
0 (unset) standing for the default, 60. That holds for the utilization metrics; the entries the
SDK builds for request counts, queue lengths and Pub/Sub backlogs carry a count in the same
field (``autoscaling_target_request_count_per_minute``), so only the utilizations below are
bounded, and any other metric name is left to the service: the list of metrics grows between API
versions, and refusing one Vertex AI accepts would be stricter than the service.

Pure: no I/O and no GAPIC client.
"""

from __future__ import annotations

from typing import Any

from kfp_spot.vertex.values import InvalidFieldError, show

__all__ = ["PERCENT_METRICS", "check_autoscaling_metric_specs"]

#: The metrics whose target is a utilization in percent (1..100), as the API reference lists them.
PERCENT_METRICS = frozenset(
    {
        "aiplatform.googleapis.com/prediction/online/cpu/utilization",
        "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle",
    }
)


def check_autoscaling_metric_specs(specs: Any, field: str) -> None:
    """``autoscalingMetricSpecs``: each names a metric, once; a utilization's target is 1..100.

    Args:
        specs: the repeated ``AutoscalingMetricSpec`` (proto-plus or raw protobuf).
        field: the request field holding them, e.g.
            ``deployedModel.dedicatedResources.autoscalingMetricSpecs``.

    Raises:
        InvalidFieldError: naming ``field[i].metricName`` or ``field[i].target``.
    """
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        where = f"{field}[{i}]"
        name = spec.metric_name
        if not name:
            raise InvalidFieldError(
                f"{where}.metricName",
                "is required: the metric to scale on, e.g. "
                "aiplatform.googleapis.com/prediction/online/cpu/utilization",
            )
        if name in seen:
            raise InvalidFieldError(
                f"{where}.metricName", f"{show(name)} is given twice: at most one entry per metric"
            )
        seen.add(name)
        if name in PERCENT_METRICS and spec.target and not 1 <= spec.target <= 100:
            raise InvalidFieldError(
                f"{where}.target",
                f"is {spec.target}; the target of {name} is a utilization in percent, 1..100 "
                "(0 or unset: the default, 60)",
            )
