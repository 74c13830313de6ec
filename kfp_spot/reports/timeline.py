"""The timeline picture of a run: attempts, preemptions, checkpoint saves and training loss."""

from __future__ import annotations

import io
import os
from pathlib import Path

from kfp_spot import fs
from kfp_spot.reports.run import PREEMPTED, RunData, last_commit_in

_REASON_COLOURS = {
    "SUCCEEDED": "#2e7d32",
    "PREEMPTED": "#ef6c00",
    "FAILED": "#c62828",
    "CANCELLED": "#757575",
    "EMULATOR_RESTARTED": "#6a1b9a",
}
_EXIT_COLOURS = {"finished": "#66bb6a", "preempted": "#ffa726", "error": "#ef5350"}
_OTHER = "#90a4ae"


def _origin(run: RunData) -> float:
    times = [r.start for r in run.ledger if r.start is not None]
    times += [a.start for a in run.attempts if a.start is not None]
    times += [s.time for s in run.saves]
    if run.started is not None:
        times.append(run.started)
    return min(times) if times else 0.0


def vm_lanes(run: RunData, now: float) -> dict[str, list[tuple[float, float, bool]]]:
    """Per-VM lanes of multi-replica attempts: ``replica -> [(start, end, away), ...]``.

    ``away`` spans are the gaps while a preempted VM was gone (the job ran on without it);
    VMs of attempts with a single replica are left out (their lane would repeat the attempt's).
    """
    lanes: dict[str, list[tuple[float, float, bool]]] = {}
    for row in run.ledger:
        if len(row.vms) < 2:
            continue
        end = row.end if row.end is not None else now
        for vm in row.vms:
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


def render_timeline(run: RunData, path: str | os.PathLike[str], *, dpi: int = 100) -> Path:
    """Draw the run's timeline to a PNG.

    Top panel, one lane each: the service's attempts (ledger rows, coloured by end reason, a
    cross where a Spot VM was preempted), each VM of a multi-replica job (grey while it ran,
    hatched while it was preempted and away, the job running on without it), the training
    process's attempts (attempt records) and the checkpoint commits (ticks). Bottom panel: the
    loss recorded with each checkpoint over the same time axis (seconds since the run started).

    Args:
        run: the run.
        path: where to write the PNG.
        dpi: resolution (the figure is 11 x 6.5 inches).

    Returns:
        The path written.
    """
    # The object API on the Agg canvas: no pyplot state, no display, no change to the user's
    # matplotlib backend (notebooks keep theirs).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    t0 = _origin(run)
    fig = Figure(figsize=(11, 6.5), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    lanes_ax, loss_ax = fig.subplots(2, 1, sharex=True, height_ratios=(1.3, 1))

    lanes: list[str] = []
    now = max(
        [t for t in (run.finished,) if t is not None]
        + [r.end for r in run.ledger if r.end is not None]
        + [a.end for a in run.attempts if a.end is not None]
        + [s.time for s in run.saves]
        + [t0],
    )

    def lane(label: str) -> int:
        if label not in lanes:
            lanes.append(label)
        return lanes.index(label)

    for job in run.job_names or ["job"]:
        rows = [r for r in run.ledger if (r.job or "job") == job]
        if not rows:
            continue
        y = lane(f"Vertex attempts\n{job.rsplit('/', 1)[-1][:18]}")
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
            lanes_ax.text(row.start - t0, y, f" #{row.attempt}", va="center", fontsize=8)
            if row.end_reason == PREEMPTED and row.end is not None:
                lanes_ax.plot(
                    [row.end - t0],
                    [y],
                    marker="X",
                    color="#b71c1c",
                    markersize=11,
                    markeredgecolor="white",
                    zorder=5,
                )

    for replica, spans in vm_lanes(run, now).items():
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

    if run.attempts:
        y = lane("training\nprocess")
        for a in run.attempts:
            if a.start is None:
                continue
            end = a.end if a.end is not None else now
            lanes_ax.broken_barh(
                [(a.start - t0, max(end - a.start, 0.0))],
                (y - 0.35, 0.7),
                facecolors=_EXIT_COLOURS.get(a.exit_reason, _OTHER),
                edgecolors="black",
                linewidth=0.5,
            )
            if a.exit_reason != "finished" and a.end is not None:
                # Work after the attempt's last commit is lost: the next attempt redoes it.
                lost_from = last_commit_in(a, run.saves) or a.start
                if a.end > lost_from:
                    lanes_ax.broken_barh(
                        [(lost_from - t0, a.end - lost_from)],
                        (y - 0.35, 0.7),
                        facecolors="none",
                        edgecolors="#b71c1c",
                        hatch="///",
                        linewidth=0,
                    )

    if run.saves:
        y = lane("checkpoint\ncommits")
        xs = [s.time - t0 for s in run.saves]
        lanes_ax.scatter(xs, [y] * len(xs), marker="|", s=300, color="#1565c0", linewidths=2)
        last = max(run.saves, key=lambda s: s.step)
        lanes_ax.annotate(
            f"step {last.step}",
            (last.time - t0, y),
            xytext=(4, 8),
            textcoords="offset points",
            fontsize=8,
        )

    lanes_ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    lanes_ax.set_ylim(-0.7, max(len(lanes), 1) - 0.3)
    lanes_ax.invert_yaxis()
    lanes_ax.grid(axis="x", alpha=0.3)
    lanes_ax.set_title(f"{run.job_name.rsplit('/', 1)[-1]}: {run.outcome}", fontsize=11)
    legend: list = [
        Patch(color=c, label=r.lower())
        for r, c in _REASON_COLOURS.items()
        if any(row.end_reason == r for row in run.ledger)
    ]
    if any(row.end_reason == PREEMPTED for row in run.ledger):
        legend.append(
            Line2D([], [], marker="X", color="#b71c1c", linestyle="none", label="preemption")
        )
    if any(away for spans in vm_lanes(run, now).values() for *_, away in spans):
        legend.append(Patch(facecolor="none", edgecolor="#b71c1c", hatch="xx", label="VM away"))
    if run.attempts:
        legend.append(Patch(facecolor="none", edgecolor="#b71c1c", hatch="///", label="lost work"))
    if legend:
        lanes_ax.legend(handles=legend, loc="upper right", fontsize=7, ncols=len(legend))
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

    points = sorted((s.time - t0, s.loss) for s in run.saves if s.loss is not None)
    if points:
        loss_ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            markersize=3,
            color="#1565c0",
        )
        for row in run.ledger:
            if row.end_reason == PREEMPTED and row.end is not None:
                loss_ax.axvline(row.end - t0, color="#b71c1c", linestyle="--", linewidth=1)
    else:
        loss_ax.text(
            0.5,
            0.5,
            "no loss recorded in checkpoint manifests",
            transform=loss_ax.transAxes,
            ha="center",
            va="center",
            color="grey",
        )
    loss_ax.set_ylabel("training loss")
    loss_ax.set_xlabel("seconds since the run started")
    loss_ax.grid(alpha=0.3)

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    fs.atomic_write(str(out), buffer.getvalue())
    return out
