"""What a run of a profile will cost on one H100 or H200, planned from each experiment's sizes before it starts.

Every experiment of the registry declares its own cost (``Experiment.cost``: its ``cost.py``, with the
figures measured for it); this module adds the rows of the experiments a run computes, with the run's
start-up once, and turns them into ``report``'s plan line, refusing a run the data folder's disk cannot
hold. The machinery (the GPUs, a row's terms, the compile pool and the device's lanes) is
:mod:`pipeline.costmodel`; ``benchmarks/gpu_budget.py`` prints the table and the measured-vs-estimated
calibration (:mod:`pipeline.plan_calibration`). Unmeasured on a GPU: B and E at seed sizes, the Diagnostics
at gpu and seed sizes, and the regression matrix (a CPU self-test, left out of a GPU run).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from .costmodel import FIRST_GPU_S, GPUS, REPORT_START_S, Cost, Gpu
from .experiments import EXPERIMENTS, experiment

#: The row every run has, whatever it selects: the report's start and its process's first GPU work.
START_UP = "start-up"

#: The assets a ``report --only`` run of some experiments materializes, by name: theirs and what they need
#: upstream. The CLI passes its own selection in (``pipeline.cli.staleness.selected_asset_names``).
Select = Callable[[Collection[str]], frozenset[str]]


def cost_of(exp_id: str) -> ModuleType:
    """The cost module experiment ``exp_id`` declares (``KeyError`` where it declares none)."""
    load = experiment(exp_id).cost
    if load is None:
        raise KeyError(f"experiment {exp_id!r} declares no cost")
    return load()


def costs(profile: str, self_tests: bool = False, device_type: str = "cuda") -> list[Cost]:
    """Every row of a run: the start-up, then each registered experiment's, in the registry's order;
    ``self_tests``: with those of a CPU self-test (the planted-bug matrix), which a run on an accelerator leaves
    to CPU reports unless ``--only Regression`` asks (``cli.run_report.CPU_SELF_TESTS``); ``device_type``: the
    run's, where a step's compiles depend on it (C's knobs and switches per device). An experiment that
    declares no cost gets an empty row that says so."""
    rows = [Cost("", START_UP, fixed_s=REPORT_START_S + FIRST_GPU_S, note="report's start, plan, first GPU work")]
    for e in EXPERIMENTS:
        if e.cost is None:
            rows.append(Cost(e.id, note="declares no cost (Experiment.cost): not estimated"))
            continue
        module = e.cost()
        if self_tests or not getattr(module, "SELF_TEST", False):
            rows += module.costs(profile, device_type)
    return rows


# --- the plan-time estimate of a run -----------------------------------------------------------------


def bytes_text(n: float) -> str:
    """``n`` bytes in words: B, kB, MB, GB or TB (powers of 1000), one decimal above B."""
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n:.0f} B"


def gpu_of(device: torch.device) -> Gpu | None:
    """The GPU of :data:`GPUS` that ``device`` is (by its CUDA name), or None: no peak figures for it."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((g for g in GPUS if g.name in name), None)


@dataclass(frozen=True)
class PlanEstimate:
    """What a run will cost, from :func:`costs` over the experiments that run."""

    profile: str
    compiles: int
    flops: float
    host_bytes: float
    disk_bytes: float
    minutes: float | None  # on ``gpu``; None where there are no peak figures for the device
    gpu: str | None


def selected_costs(
    profile: str, experiments: Collection[str] | None = None, device_type: str = "cuda", select: Select | None = None
) -> list[Cost]:
    """The rows of :func:`costs` a run on a ``device_type`` device computes: all, or (``experiments`` given)
    the start-up and the rows whose assets ``select`` says the run materializes (``--only A`` stores A's FFN
    pool, not B's chain pools)."""
    rows = costs(profile, experiments is not None and "Regression" in experiments, device_type)
    if experiments is None:
        return rows
    if select is None:
        raise ValueError("a plan of some experiments needs the selection of their assets (select)")
    chosen = select(experiments)
    ids = {c.experiment for c in rows if c.experiment and not c.assets}
    owned = {e: frozenset(k.to_user_string() for a in experiment(e).assets() for k in a.keys) for e in ids}
    return [c for c in rows if not c.experiment or (c.assets or owned[c.experiment]) & chosen]


def plan_estimate(
    profile: str, device: torch.device, experiments: Collection[str] | None = None, select: Select | None = None
) -> PlanEstimate:
    """The estimate of a ``profile`` run on ``device``: every experiment, or those in ``experiments``
    (ids such as ``B`` or ``Diagnostics``) with what they need upstream (``select``)."""
    rows = selected_costs(profile, experiments, device.type, select)
    gpu = gpu_of(device)
    return PlanEstimate(
        profile,
        sum(c.compiles for c in rows),
        sum(c.flops + c.fp32_flops for c in rows),
        sum(c.host_bytes for c in rows),
        sum(c.disk_bytes for c in rows),
        None if gpu is None else sum(c.minutes(gpu) for c in rows),
        None if gpu is None else gpu.name,
    )


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds ``folder`` (its nearest existing parent when it is not there yet)."""
    here = folder.resolve()
    while not here.exists() and here != here.parent:
        here = here.parent
    return shutil.disk_usage(here).free


def announce(
    profile: str,
    device: torch.device,
    data_dir: Path,
    experiments: Collection[str] | None = None,
    out: Callable[[str], None] = print,
    select: Select | None = None,
) -> int | None:
    """Print the plan-time estimate of a run in one line, saying it is one (``report`` prints what the run
    stored when it ends: :func:`pipeline.run_summary.stored_bytes`); when the data folder's disk cannot hold what
    the run stores, print one line saying so and return 2 (the CLI's exit status for a refused run),
    else None."""
    est = plan_estimate(profile, device, experiments, select)
    if est.minutes is not None:
        when = f"about {est.minutes:.0f} min on this {est.gpu} (datasheet peaks and the H200 run of 2026-11-27; benchmarks/gpu_budget.py)"
    else:
        when = f"no peak figures for {device}, so no minutes (the {profile} profile's budget applies)"
    out(
        f"plan (estimated from the {profile} profile's sizes before the run): {est.compiles} compiles, "
        f"{est.flops / 1e12:.1f} TFLOP, {bytes_text(est.host_bytes)} between host and device, "
        f"{bytes_text(est.disk_bytes)} stored in {data_dir}; {when}"
    )
    free = free_bytes(data_dir)
    if est.disk_bytes > free:
        out(
            f"refusing to start: the {profile} run stores about {bytes_text(est.disk_bytes)} in {data_dir} and its "
            f"disk has {bytes_text(free)} free"
        )
        return 2
    return None
