"""The timeline picture of a run: attempts, preemptions, checkpoint saves and training loss."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kfp_spot import fs
from kfp_spot.accounting import EndReason, RegionSummary, Summary, region_of_job
from kfp_spot.checkpoints import ExitReason
from kfp_spot.reports.run import DEFAULT_METRIC, RunData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The matplotlib modules timeline_figure imports (preload_timeline loads them ahead of a report;
# tests/reports/test_timeline_preload.py checks that the two agree).
MATPLOTLIB_MODULES = (
    "matplotlib.artist",
    "matplotlib.backends.backend_agg",
    "matplotlib.figure",
    "matplotlib.lines",
    "matplotlib.patches",
)

_OTHER = "#90a4ae"
_REASON_COLOURS = {
    EndReason.SUCCEEDED: "#2e7d32",
    EndReason.PREEMPTED: "#ef6c00",
    EndReason.FAILED: "#c62828",
    EndReason.CANCELLED: "#757575",
    EndReason.EMULATOR_RESTARTED: "#6a1b9a",
    EndReason.UNKNOWN: _OTHER,  # ended without a record of why
}
_EXIT_COLOURS = {
    ExitReason.FINISHED: "#66bb6a",
    ExitReason.PREEMPTED: "#ffa726",
    ExitReason.ERROR: "#ef5350",
}


def _origin(run: RunData, summary: Summary) -> float:
    times = [a.start for a in summary.attempts if a.start is not None]
    times += [r.start_time for r in run.records]
    times += [c.time for c in run.kept_commits]
    if run.started is not None:
        times.append(run.started)
    return min(times) if times else 0.0


def vm_lanes(summary: Summary, now: float) -> dict[str, list[tuple[float, float, bool]]]:
    """Per-VM lanes of multi-replica attempts: ``replica -> [(start, end, away), ...]``.

    ``away`` spans are the gaps while a preempted VM was gone (the job ran on without it); VMs of
    attempts with a single replica are left out (their lane would repeat the attempt's).
    """
    lanes: dict[str, list[tuple[float, float, bool]]] = {}
    for attempt in summary.attempts:
        if len(attempt.vms) < 2:
            continue
        end = attempt.end if attempt.end is not None else now
        for vm in attempt.vms:
            spans = lanes.setdefault(vm.replica, [])
            last = None
            for start, stop in vm.runs:
                if last is not None and start > last:
                    spans.append((last, start, True))
                last = stop if stop is not None else end
                spans.append((start, last, False))
            if last is not None and last < end:
                spans.append((last, end, True))
    return lanes


def lane_label(job_name: str, region: str, source: str) -> str:
    """An attempts lane's label: ``attempts (ledger)`` over ``customJobs/12 · europe-west4``.

    The whole job id (an int64 of up to 19 digits) on a line of its own: never cut.
    """
    job = f"customJobs/{job_name.rsplit('/', 1)[-1]}"
    return f"attempts ({source})\n{job} · {region}" if region else f"attempts ({source})\n{job}"


def failover_marks(regions: RegionSummary | None) -> list[tuple[float, str]]:
    """Where the timeline marks the launch moving regions: ``(time, "→ europe-west4")``.

    At the start of the first attempt in the new region; a failover whose job never started an
    attempt has no place on the time axis and is left out (the Markdown still lists it).
    """
    if regions is None:
        return []
    return [(f.time, f"→ {f.destination}") for f in regions.failovers if f.time is not None]


def render_timeline(
    run: RunData,
    path: str | os.PathLike[str],
    *,
    summary: Summary | None = None,
    regions: RegionSummary | None = None,
    dpi: int = 100,
) -> Path:
    """Draw the run's timeline (:func:`timeline_figure`) to a PNG.

    Args:
        run: the run.
        path: where to write the PNG.
        summary: the run's accounting summary (default: ``run.account()``).
        regions: where it ran (default: ``run.account_regions(summary)``).
        dpi: resolution (the figure is 11 x 6.5 inches).

    Returns:
        The path written.
    """
    fig = timeline_figure(run, summary=summary, regions=regions, dpi=dpi)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    fs.atomic_write(str(out), buffer.getvalue())
    return out


def timeline_figure(
    run: RunData,
    *,
    summary: Summary | None = None,
    regions: RegionSummary | None = None,
    dpi: int = 100,
) -> Figure:
    """The run's timeline as a matplotlib figure (on the Agg canvas).

    Top panel, one lane each: every job's billed attempts (the accounting summary's, coloured by
    end reason, a cross at each preemption, emulator restarts included, and the billed time lost
    after an attempt's last checkpoint hatched), the training process's attempts (attempt
    records) and the checkpoint commits (ticks). Bottom panel: the metric recorded with each
    checkpoint (``run.metric_name``: ``loss``, or the trainer's own when it records no loss) over
    the same time axis (seconds since the run started). A multi-replica job also
    gets a lane per VM: grey while it ran, hatched while it was preempted and away (the job ran on
    without it).

    Each job's lane is labelled with its region (:func:`lane_label`); where the launch moved to
    another region a dashed line crosses the lanes, labelled with the new region
    (:func:`failover_marks`, the artists with gid ``failover``).

    The commit ticks are the artists with gid ``commits-on-disk`` and ``commits-deleted`` (steps
    retention deleted, from the attempt records), the metric's line has gid ``loss``.

    Args:
        run: the run.
        summary: the run's accounting summary (default: ``run.account()``).
        regions: where it ran (default: ``run.account_regions(summary)``).
        dpi: resolution (the figure is 11 x 6.5 inches).

    Returns:
        The figure.
    """
    # The object API on the Agg canvas: no pyplot state, no display, no change to the user's
    # matplotlib backend (notebooks keep theirs).
    from matplotlib.artist import Artist
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    summary = summary if summary is not None else run.account()
    regions = regions if regions is not None else run.account_regions(summary)
    marks = run.kept_commits
    t0 = _origin(run, summary)
    fig = Figure(figsize=(11, 6.5), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    lanes_ax, loss_ax = fig.subplots(2, 1, sharex=True, height_ratios=(1.3, 1))

    lanes: list[str] = []
    now = max(
        [t for t in (run.finished,) if t is not None]
        + [a.end for a in summary.attempts if a.end is not None]
        + [r.end_time for r in run.records if r.end_time is not None]
        + [c.time for c in marks]
        + [t0],
    )

    def lane(label: str) -> int:
        if label not in lanes:
            lanes.append(label)
        return lanes.index(label)

    jobs = list(dict.fromkeys([*run.job_names, *(a.job_name for a in summary.attempts)]))
    for job in jobs or ["job"]:
        rows = [a for a in summary.attempts if a.job_name == job]
        if not rows:
            continue
        region = run.job_regions.get(job) or region_of_job(job)
        y = lane(lane_label(job, region, summary.source.value))
        for row in rows:
            if row.start is None:
                continue
            end = row.end if row.end is not None else now
            colour = _REASON_COLOURS.get(row.end_reason, _OTHER)
            lanes_ax.broken_barh(
                [(row.start - t0, max(end - row.start, 0.0))],
                (y - 0.35, 0.7),
                facecolors=colour,
                edgecolors="black",
                linewidth=0.5,
            )
            if row.number:
                # Above the bar's middle: clear of the preemption mark at the previous
                # attempt's end and of this attempt's own.
                lanes_ax.text(
                    (row.start + end) / 2 - t0,
                    y - 0.38,
                    f"#{row.number}",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
            if row.lost_seconds and row.end is not None:
                # Billed time after the attempt's last commit: lost, the next attempt redoes it.
                lanes_ax.broken_barh(
                    [(row.end - row.lost_seconds - t0, row.lost_seconds)],
                    (y - 0.35, 0.7),
                    facecolors="none",
                    edgecolors="#b71c1c",
                    hatch="///",
                    linewidth=0,
                )
            if row.is_preemption and row.end is not None:
                lanes_ax.plot(
                    [row.end - t0],
                    [y],
                    marker="X",
                    color="#b71c1c",
                    markersize=11,
                    markeredgecolor="white",
                    zorder=5,
                )

    vms = vm_lanes(summary, now)
    for replica, spans in vms.items():
        y = lane(f"VM {replica}")
        for start, end, away in spans:
            lanes_ax.broken_barh(
                [(start - t0, max(end - start, 0.0))],
                (y - 0.25, 0.5),
                facecolors="none" if away else "#78909c",
                edgecolors="#b71c1c" if away else "black",
                hatch="xx" if away else None,
                linewidth=0.5,
            )

    if run.records:
        y = lane("training\nprocess")
        for r in run.records:
            end = r.end_time if r.end_time is not None else now
            lanes_ax.broken_barh(
                [(r.start_time - t0, max(end - r.start_time, 0.0))],
                (y - 0.35, 0.7),
                facecolors=_EXIT_COLOURS.get(r.exit_reason, _OTHER) if r.exit_reason else _OTHER,
                edgecolors="black",
                linewidth=0.5,
            )

    if marks:
        y = lane("checkpoint\ncommits")
        for gid, on_disk, colour in (
            ("commits-on-disk", True, "#1565c0"),
            ("commits-deleted", False, "#90caf9"),
        ):
            xs = [c.time - t0 for c in marks if c.on_disk is on_disk]
            lanes_ax.scatter(
                xs, [y] * len(xs), marker="|", s=300, color=colour, linewidths=2, gid=gid
            )
        last = marks[-1]
        labelled = [c for c in marks if c.resumed_from or c is last]
        for index, mark in enumerate(labelled):
            # Alternate above and below the ticks so neighbouring labels do not collide.
            lanes_ax.annotate(
                f"step {mark.step}",
                (mark.time - t0, y),
                xytext=(0, 11 if index % 2 == 0 else -11),
                textcoords="offset points",
                ha="center",
                va="center",
                fontsize=7,
            )

    for when, text in failover_marks(regions):
        lanes_ax.axvline(when - t0, color="#283593", linestyle="--", linewidth=1.2, gid="failover")
        lanes_ax.annotate(
            text,
            (when - t0, 0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=8,
            color="#283593",
        )

    lanes_ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    lanes_ax.set_ylim(-0.7, max(len(lanes), 1) - 0.3)
    lanes_ax.invert_yaxis()
    lanes_ax.grid(axis="x", alpha=0.3)
    lanes_ax.set_title(f"{run.job_name.rsplit('/', 1)[-1]}: {run.outcome}", fontsize=11)
    legend: list[Artist] = [
        Patch(color=c, label=r.value.lower())
        for r, c in _REASON_COLOURS.items()
        if any(a.end_reason is r for a in summary.attempts)
    ]
    if any(a.is_preemption for a in summary.attempts):
        legend.append(
            Line2D([], [], marker="X", color="#b71c1c", linestyle="none", label="preemption")
        )
    if any(away for spans in vms.values() for *_, away in spans):
        legend.append(Patch(facecolor="none", edgecolor="#b71c1c", hatch="xx", label="VM away"))
    if any(a.lost_seconds for a in summary.attempts):
        legend.append(Patch(facecolor="none", edgecolor="#b71c1c", hatch="///", label="lost work"))
    if failover_marks(regions):
        legend.append(Line2D([], [], color="#283593", linestyle="--", label="failover"))
    if any(not c.on_disk for c in marks):
        legend.append(
            Line2D(
                [],
                [],
                marker="|",
                color="#90caf9",
                linestyle="none",
                markersize=10,
                markeredgewidth=2,
                label="commit deleted by retention",
            )
        )
    if legend:
        # Beside the lanes, never over a bar, its number or a mark.
        lanes_ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    if not lanes:
        lanes_ax.text(
            0.5,
            0.5,
            "no attempts recorded",
            transform=lanes_ax.transAxes,
            ha="center",
            va="center",
            color="grey",
        )

    metric = run.metric_name
    points = sorted((c.time - t0, c.loss) for c in marks if c.loss is not None)
    if points:
        loss_ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            markersize=3,
            color="#1565c0",
            gid="loss",
        )
        for row in summary.attempts:
            if row.is_preemption and row.end is not None:
                loss_ax.axvline(row.end - t0, color="#b71c1c", linestyle="--", linewidth=1)
        # Commits without a value: their manifest (and metric) deleted by retention, or saved
        # without the metric (a final ckpt.save(step, state)): where, not how much.
        for on_disk, label in (
            (False, f"commit whose {metric}\nretention deleted"),
            (True, f"commit saved without {metric}"),
        ):
            times = [c.time - t0 for c in marks if c.loss is None and c.on_disk == on_disk]
            if times:
                loss_ax.plot(
                    times,
                    [0.03] * len(times),
                    transform=loss_ax.get_xaxis_transform(),
                    marker="^" if not on_disk else "v",
                    linestyle="none",
                    markerfacecolor="none",
                    color="#1565c0",
                    label=label,
                )
        if any(c.loss is None for c in marks):
            loss_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    else:
        loss_ax.text(
            0.5,
            0.5,
            f"no {metric} recorded in checkpoint manifests",
            transform=loss_ax.transAxes,
            ha="center",
            va="center",
            color="grey",
        )
    loss_ax.set_ylabel("training loss" if metric == DEFAULT_METRIC else metric)
    loss_ax.set_xlabel("seconds since the run started")
    loss_ax.grid(alpha=0.3)

    return fig
