"""A blind differential-testing campaign against one compiler, by adapter name: programs of the
CPU plan (:func:`precisionkit.difftest.plan`) from a first seed never used before, each run in one
worker interpreter (a crash in the compiler's native code costs one program and is a finding of
its own), every mismatch and crash minimized and written as a reproducer that needs only torch and
that compiler, and every reproducer rerun in a fresh interpreter. Prints the warm throughput
(programs a minute on the one core the worker runs on, the first programs, which load the
compiler, left out) and writes ``index.json`` / ``index.md`` and one folder per finding under
``--out``.

    .venv/bin/python benchmarks/difftest_campaign.py --backend openvino --programs 300 --base 905000
    .venv/bin/python benchmarks/difftest_campaign.py --backend iree --programs 300 --base 906000
    .venv/bin/python benchmarks/difftest_campaign.py --minimize-from results/campaigns/<date>-iree --minimize-checks 15

The rule that judged a finding is read from its message: ``fp64`` (fused against eager and the
fp64 reference), ``dtype-faithful`` (a class change against the reference rounded per op to the
program's own dtypes), ``consistency`` (an output disagrees with the one it is computed from);
``crash`` (the worker died in the fused run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: programs left out of the warm figure: the first ones import and initialise the compiler
WARMUP = 5


def rule_of(klass: str, message: str) -> str:
    """Which rule judged a finding, from its class and message."""
    if klass == "crash":
        return "crash"
    if "dtype-faithful reference" in message:
        return "dtype-faithful"
    if "inconsistent with fused output" in message:
        return "consistency"
    return "fp64"


def value_class(message: str) -> str:
    """The kind of wrong value a finding's message shows at the element it names, eager's against
    fused's (shape/dtype, bool, inf or NaN, the sign of a zero, finite)."""
    if "shape or dtype differs" in message:
        return "shape or dtype"
    m = re.search(r"eager (\S+), fused \([^)]*\) (\S+),", message.lower())
    eager, fused = (m.group(1), m.group(2)) if m else ("", "")
    pair = f"{eager} / {fused}"
    if any(w in pair for w in ("true", "false")):
        return "bool"
    if any(w in pair for w in ("inf", "nan")):
        return "inf or NaN"
    try:
        zeros = float(eager) == 0.0 == float(fused) and str(eager).startswith("-") != str(fused).startswith("-")
    except ValueError:
        zeros = False
    return "signed zero" if zeros else "finite value"


def _reproduce(worker: Any, o: Any, backend: str, out: Path, minimize_checks: int) -> dict[str, Any]:
    """One finding minimized (a mismatch), written as a reproducer file, rerun in a fresh interpreter:
    its row of the campaign's index. A crash, and a mismatch one of whose candidates crashed the
    worker, are written as found (``"minimized": false``)."""
    from precisionkit.repro import for_backend, run_script, write

    # a crash's outcome holds the program as generated (the worker died before it could say how it
    # compiled it): the reproducer must compile with the campaign's compiler, not the default Inductor
    case, message, t0 = for_backend(o.case, backend), o.message, time.perf_counter()
    small = worker.minimize(case, minimize_checks) if o.klass == "mismatch" else None
    seconds = time.perf_counter() - t0  # the minimizing alone, not the rerun below
    if small is not None:
        case, message = small[0], small[1]
    folder = out / case.id
    script = write(case, folder, f"Found by a blind campaign against {backend}: {o.klass}: {o.message[:160]}")
    rerun = run_script(script, timeout=600, cwd=folder)
    row = {
        "id": case.id,
        "class": o.klass,
        "rule": rule_of(o.klass, o.message),
        "value_class": "crash" if o.klass == "crash" else value_class(o.message),
        "message": o.message,
        "minimized_message": message,
        "lines_before": o.case.source.count("\n"),
        "lines_after": case.source.count("\n"),
        "minimized": small is not None,
        "minimize_seconds": round(seconds, 1),
        "rerun": rerun.status,
        "rerun_returncode": rerun.returncode,
        "rerun_line": rerun.last_line[:300],
        "verdict": "",
    }
    print(f"  {case.id}: {row['rule']} / {row['value_class']}: rerun {rerun.status}", flush=True)
    return row


#: a finding's line in the campaign's log: ``  k/n <id>: <class>: <message, first 200 characters>``
FOUND = re.compile(r"^  \d+/\d+ (\S+): (mismatch|crash): (.*)$")


def finish_unminimized(log: Path, out: Path, backend: str) -> int:
    """The findings a campaign stopped at a deadline had not reproduced yet (read from its log), each
    written as found, without minimizing, and rerun in a fresh interpreter: rows marked
    ``"minimized": false`` appended to ``index.json``."""
    from precisionkit import difftest
    from precisionkit.repro import for_backend, run_script, write

    index = json.loads((out / "index.json").read_text())
    have = {r["id"] for r in index["findings"]}
    found = [m.groups() for m in map(FOUND.match, log.read_text().splitlines()) if m]
    for name, klass, message in (f for f in found if f[0] not in have):
        gen, seed = name.split("-")[0], int(name.split("-")[1])
        case = for_backend(difftest.generate(seed, gen), backend)
        script = write(case, out / case.id, f"Found by a blind campaign against {backend}: {klass}: {message[:160]}")
        rerun = run_script(script, timeout=600, cwd=script.parent)
        line = rerun.last_line[:300]
        index["findings"].append(
            {
                "id": case.id,
                "class": klass,
                "rule": rule_of(klass, message),
                "value_class": "crash" if klass == "crash" else value_class(message),
                "message": message,
                "minimized_message": line.split(": ", 1)[1] if line.startswith("REPRODUCES: ") else message,
                "minimized": False,
                "lines_before": case.source.count("\n"),
                "lines_after": case.source.count("\n"),
                "minimize_seconds": 0.0,
                "rerun": rerun.status,
                "rerun_returncode": rerun.returncode,
                "rerun_line": line,
                "verdict": "",
            }
        )
        _save_reproduced(out, index, len(found))
        print(f"  {case.id}: unminimized, rerun {rerun.status}", flush=True)
    return 0


def _save_reproduced(out: Path, index: dict[str, Any], found: int) -> None:
    """index.json with its count of findings reproduced (of ``found``) and of those minimized."""
    kept = sum(1 for r in index["findings"] if r.get("minimized", True))
    index["findings_reproduced"] = f"{len(index['findings'])} of {found} ({kept} minimized)"
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def _program_changed(case: Any, as_found: Path) -> bool:
    """Whether the program its generator gives now (``case``) is another than the one a finding's
    folder holds as found (``case.json``: source or inputs), e.g. a generator fixed since the campaign
    ran; False where the folder holds none."""
    if not as_found.exists():
        return False
    found = json.loads(as_found.read_text())
    now = json.loads(json.dumps(case.to_json()))
    return any(found.get(k) != now.get(k) for k in ("source", "inputs"))


def minimize_unminimized(out: Path, backend: str, minimize_checks: int) -> int:
    """The mismatches a stopped campaign wrote as found (``--finish-from``), minimized in place: each
    regenerated from its generator and seed, minimized in a worker interpreter and written again by
    the main loop's :func:`_reproduce` (its folder's reproducer, rerun in a fresh interpreter, and a
    new index row in the old one's place), index.json saved after each, so a stop loses none done.
    The classifier's reruns of the file as found are dropped with its old row (and from reruns.json):
    the classifier reruns the new one. A row whose minimizing was tried (its seconds recorded) and
    crashed the worker stays as found and is not tried again; a crash is not minimized (nor is it in
    the main loop). A program the generator now writes otherwise than the folder's as-found one is
    minimized as the generator writes it now, its row marked ``"program_changed": true``."""
    from types import SimpleNamespace

    from precisionkit import difftest

    index = json.loads((out / "index.json").read_text())
    rows = index["findings"]
    found = int(str(index.get("findings_reproduced", "")).split(" (")[0].rpartition(" of ")[2] or len(rows))
    todo = [
        k
        for k, r in enumerate(rows)
        if r["class"] == "mismatch" and not r.get("minimized", True) and not r.get("minimize_seconds")
    ]
    print(f"{backend}: {len(todo)} findings of {out.name} to minimize", flush=True)
    reruns = out / "reruns.json"
    with difftest.Isolated() as worker:
        for n, k in enumerate(todo):
            row = rows[k]
            gen, seed = row["id"].split("-")[0], int(row["id"].split("-")[1])
            case = difftest.generate(seed, gen)
            if case.id != row["id"]:
                raise SystemExit(f"{row['id']}: its generator and seed give {case.id} now (the generator changed)")
            changed = _program_changed(case, out / row["id"] / "case.json")
            print(
                f"  {n + 1}/{len(todo)}{' (the generator changed its program)' if changed else ''}", end="", flush=True
            )
            rows[k] = _reproduce(
                worker,
                SimpleNamespace(case=case, klass="mismatch", message=row["message"]),
                backend,
                out,
                minimize_checks,
            )
            if changed:
                rows[k]["program_changed"] = True
            if reruns.exists():
                saved = json.loads(reruns.read_text())
                if saved.pop(row["id"], None) is not None:
                    reruns.write_text(json.dumps(saved, indent=2) + "\n")
            _save_reproduced(out, index, found)
            print(
                f"    {rows[k]['lines_before']} -> {rows[k]['lines_after']} lines in {rows[k]['minimize_seconds']} s",
                flush=True,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default=None, help="adapter (inductor, openvino, iree, a user's) or backend")
    ap.add_argument("--programs", type=int, default=300)
    ap.add_argument("--base", type=int, help="first seed (record it: a campaign's seeds are used once)")
    ap.add_argument("--out", default=None, help="default results/campaigns/<date>-<backend>")
    ap.add_argument("--minimize-checks", type=int, default=None, help="default 40 (--minimize-from: the campaign's)")
    ap.add_argument("--throughput-only", action="store_true", help="run the programs and print the throughput only")
    ap.add_argument(
        "--finish-from", default=None, help="a stopped campaign's log: write its other findings unminimized"
    )
    ap.add_argument(
        "--minimize-from", default=None, help="a campaign's folder: minimize the findings it wrote as found, in place"
    )
    ns = ap.parse_args(argv)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="difftest-campaign-"))
    if ns.minimize_from:
        out = Path(ns.minimize_from).resolve()  # reruns run in its folders
        index = json.loads((out / "index.json").read_text())
        if ns.backend not in (None, index["backend"]):
            ap.error(f"{out} is a campaign against {index['backend']}, not {ns.backend}")
        checks = index.get("minimize_checks", 40) if ns.minimize_checks is None else ns.minimize_checks
        return minimize_unminimized(out, index["backend"], checks)
    ns.backend = ns.backend or "inductor"
    ns.minimize_checks = 40 if ns.minimize_checks is None else ns.minimize_checks
    if ns.finish_from:
        return finish_unminimized(Path(ns.finish_from), Path(ns.out).resolve(), ns.backend)
    if ns.base is None:
        ap.error("the campaign's first seed (--base) is needed")
    from precisionkit import difftest
    from precisionkit.backends import compile_target

    target, _ = compile_target(ns.backend)  # a compiler that is not installed fails here, in one line
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    out = Path(ns.out or ROOT / "results" / "campaigns" / f"{date}-{ns.backend}").resolve()  # reruns run in its folders
    out.mkdir(parents=True, exist_ok=True)
    todo = difftest.plan(ns.programs, ns.base)
    print(f"{ns.backend} (torch.compile backend {target!r}): {len(todo)} programs from seed {ns.base}", flush=True)
    classes: Counter[str] = Counter()
    findings = []
    run_seconds: list[float] = []
    with difftest.Isolated() as worker:
        for k, (gen, seed) in enumerate(todo):
            case = difftest.generate(seed, gen)
            t0 = time.perf_counter()
            o = worker.run(case, ns.backend, difftest.threads_for(gen, seed))
            run_seconds.append(time.perf_counter() - t0)
            classes[o.klass] += 1
            if o.klass in ("mismatch", "crash"):
                findings.append(o)
                print(f"  {k + 1}/{len(todo)} {o.case.id}: {o.klass}: {o.message[:200]}", flush=True)
            elif (k + 1) % 25 == 0:
                print(f"  {k + 1}/{len(todo)} {dict(classes)}", flush=True)
        warm = run_seconds[WARMUP:] or run_seconds
        per_minute = 60.0 * len(warm) / max(sum(warm), 1e-9)
        print(
            f"warm throughput: {per_minute:.1f} programs a minute on one core ({len(warm)} programs in "
            f"{sum(warm):.0f} s, the first {WARMUP} left out)",
            flush=True,
        )
        if ns.throughput_only:
            print(json.dumps({"backend": ns.backend, "classes": dict(classes), "programs_per_minute": per_minute}))
            return 0
        rows: list[dict[str, Any]] = []
        for o in findings:  # the index is written after each finding: a campaign stopped early keeps its rows
            rows.append(_reproduce(worker, o, ns.backend, out, ns.minimize_checks))
            _write_index(out, ns, target, len(todo), classes, per_minute, rows, len(findings))
    index = _write_index(out, ns, target, len(todo), classes, per_minute, rows, len(findings))
    print(json.dumps({k: v for k, v in index.items() if k != "findings"}), flush=True)
    return 0


def _write_index(
    out: Path,
    ns: argparse.Namespace,
    target: str,
    programs: int,
    classes: Counter[str],
    per_minute: float,
    rows: list[dict[str, Any]],
    found: int,
) -> dict[str, Any]:
    """The campaign's index.json: its seeds, classes, warm throughput and the findings reproduced so far."""
    index = {
        "backend": ns.backend,
        "torch_compile_backend": target,
        "base_seed": ns.base,
        "programs": programs,
        "seeds": f"{ns.base}..{ns.base + programs - 1} per generator (difftest.plan)",
        "classes": dict(classes),
        "warm_programs_per_minute": round(per_minute, 1),
        "minimize_checks": ns.minimize_checks,
        "findings_reproduced": f"{len(rows)} of {found}",
        "findings": rows,
    }
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index


if __name__ == "__main__":
    raise SystemExit(main())
