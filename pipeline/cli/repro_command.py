"""``repros``: build reproducers (planted bugs, rows of D, fuzzer and differential-tester seeds)
and list every reproducer of a profile with its status."""

import sys
from pathlib import Path
from typing import Any

from precisionkit.repro import Case


def _declared_sources() -> dict[str, Any]:
    """``--make`` prefix -> the experiment whose record declares reproducer cases under it."""
    from ..experiments import EXPERIMENTS

    return {e.reproducers.prefix: e for e in EXPERIMENTS if e.reproducers is not None}


def _forms() -> str:
    declared = [f"{p}/{e.reproducers.load().SPEC_FORM} (a row of {e.id})" for p, e in _declared_sources().items()]
    return ", ".join([*declared, "fuzz/<seed>[/<dtype>]", "difftest/<generator>/<seed>[/<dtype>]"])


def repro_case(spec: str, backend: str, device: str = "cpu") -> Case:
    """A case on ``device`` from a ``--make`` spec: ``<prefix>/...`` of an experiment that declares reproducer
    cases (D: ``d/<subgraph>/<dtype>/<BxSxH>/<layout>``), ``fuzz/<seed>[/<dtype>]`` or
    ``difftest/<generator>/<seed>[/<dtype>]``."""
    from ..instruments.diagnostics.cases import difftest_case, fuzz_case

    parts = spec.strip("/").split("/")
    source = _declared_sources().get(parts[0])
    if source is not None:
        made = source.reproducers.load().spec_case(parts[1:], backend, device)
        if made is not None:
            return made
    if parts[0] == "fuzz" and len(parts) in (2, 3) and parts[1].isdigit():
        return fuzz_case(int(parts[1]), backend, parts[2] if len(parts) == 3 else None, device=device)
    if parts[0] == "difftest" and len(parts) in (3, 4) and parts[2].isdigit():
        return difftest_case(parts[1], int(parts[2]), parts[3] if len(parts) == 4 else None, backend, device=device)
    raise ValueError(f"--make {spec!r}: expected {_forms()}")


def _build_planted(planted: list[str], root: Path, knobs: bool) -> int:
    """Build a reproducer of each planted bug named (none named: every one); 2 for an unknown name."""
    from ..instruments.diagnostics.repro_build import build
    from ..instruments.regression.planted_bugs import PLANTED_BUGS
    from ..instruments.regression.probes import planted_case

    unknown = [b for b in planted if b not in PLANTED_BUGS and f"planted_{b}" not in PLANTED_BUGS]
    if unknown:
        print(f"repros: unknown planted bug(s) {', '.join(unknown)}; known: {', '.join(PLANTED_BUGS)}", file=sys.stderr)
        return 2
    for bug in [b if b in PLANTED_BUGS else f"planted_{b}" for b in planted] or list(PLANTED_BUGS):
        case, tried = planted_case(bug, log=print)
        if case is None:
            print(f"{bug}: no probe shows it ({tried} probes tried)")
            continue
        meta = build(case, root, control="inductor", knobs=knobs, log=print)
        print(f"{bug}: {meta['ops_before']} -> {meta['ops_after']} ops, at fault: {meta['layer_at_fault']}")
    return 0


def repros(
    profile: str,
    data_dir: str | None,
    planted: list[str] | None,
    make: list[str],
    python: str | None,
    backend: str,
    knobs: bool,
    device: str = "cpu",
) -> int:
    """Build reproducers (planted bugs, D rows, fuzzer seeds), then list every reproducer of the
    profile with its status, each re-run in a fresh interpreter (``python``: another torch). The
    ``--make`` cases run on ``device`` (``auto``: the accelerator where there is one)."""
    from ..instruments.diagnostics.repro_build import build, rerun, torch_version_of
    from ..resources import device_problem, resolve_device
    from ..storage import DataFolder, default_data_root

    root = DataFolder(root=data_dir or default_data_root()).profile_dir(profile) / "repros"
    if python:
        try:
            torch_version_of(python)
        except (OSError, ValueError) as exc:
            print(f"repros: --python {python}: {exc}", file=sys.stderr)
            return 2
    problem = device_problem(device)
    if problem is not None:
        print(f"repros: --device {device}: {problem}", file=sys.stderr)
        return 2
    try:
        cases = [repro_case(spec, backend, str(resolve_device(device))) for spec in make]
    except ValueError as exc:
        print(f"repros: {exc}", file=sys.stderr)
        return 2
    if planted is not None and _build_planted(planted, root, knobs) != 0:
        return 2
    for case in cases:
        meta = build(case, root, knobs=knobs, log=print)
        print(f"{meta['id']}: {meta['status']}, at fault: {meta['layer_at_fault']}; workaround: {meta['workaround']}")
    print(f"reproducers in {root}:")
    rows = rerun(root, python, log=print)
    if not rows:
        print("  none (build some with --planted, --make, or run the report: contradictions get one each)")
    return 0
