"""Classify a campaign's findings (``benchmarks/difftest_campaign.py``'s ``index.json``) as real
defect, by design or false alarm, and write ``index.md`` beside it with the table by rule and class.

Each reproducer is rerun in a fresh interpreter with the knob of its compiler that restores the
program's own precision (OpenVINO: ``INFERENCE_PRECISION_HINT=f32``, which stops its CPU default of
bf16 execution; IREE: ``keep_intermediate_roundings``, which keeps the roundings to f16/bf16 between
fused operations); the verdict, in order:

* ``real defect``: a crash of the compiler's native code, an output of another shape or dtype, or a
  finding the knob does not remove (other than the next two);
* ``by design``: a finding the knob removes (the compiler's documented precision setting), or a
  dtype-faithful class change of a float whose fused value has the fp64 reference's class (wider
  intermediates avoided an overflow the program's dtype has; a bool's change is a defect: the class
  test contradicts the program's own value);
* ``false alarm``: a reproducer that does not reproduce in a fresh interpreter.

    .venv/bin/python benchmarks/difftest_classify.py results/campaigns/<date>-openvino
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: the knob that restores the program's own precision, per adapter
PRECISION_KNOB = {
    "openvino": "INFERENCE_PRECISION_HINT=f32 (no bf16/f16 execution)",
    "iree": "keep_intermediate_roundings",
}


def _kind(text: str) -> str:
    t = text.strip().lower()
    if t in ("nan", "inf", "-inf"):
        return t
    try:
        v = float(t)
    except ValueError:
        return t
    return "zero" if v == 0 else "finite"


def verdict(row: dict, knob_status: str, knob: str) -> str:
    if row["class"] == "crash":
        if row["rerun_returncode"] < 0:
            return "real defect: the compiler's native code crashed, again in a fresh interpreter"
        return f"unconfirmed crash: in a fresh interpreter the reproducer is {row['rerun']} ({row['rerun_line'][:80]})"
    if row["rerun"] != "reproduces":
        return f"false alarm: the reproducer is {row['rerun']} in a fresh interpreter"
    if row["value_class"] == "shape or dtype":
        return "real defect: an output of another dtype or shape"
    if knob_status == "clean":
        return f"by design: {knob} removes it (the compiler's precision setting)"
    m = re.search(r"fused \([^)]*\) ([^,]+), dtype-faithful ([^,]+), fp64 ([^;]+)$", row["minimized_message"])
    widened = m is not None and m.group(1) not in ("True", "False") and _kind(m.group(1)) == _kind(m.group(3))
    if row["rule"] == "dtype-faithful" and widened:
        return "by design: wider intermediates avoid an overflow of the program's dtype (fp64 sides with fused)"
    return "real defect: not removed by the compiler's precision setting"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--no-knob", action="store_true", help="judge without rerunning with the precision knob")
    ns = ap.parse_args(argv)
    from precisionkit.bisect import KNOB_BACKEND, _adapter_knobs
    from precisionkit.repro import run_script

    folder = Path(ns.folder)
    index = json.loads((folder / "index.json").read_text())
    name = PRECISION_KNOB.get(index["backend"], "")
    knob = next((k for k in _adapter_knobs(index["torch_compile_backend"]) if k.name == name), None)
    if ns.no_knob:
        knob, name = None, ""
    for row in index["findings"]:
        status = ""
        if knob is not None and row["class"] != "crash" and row["rerun"] == "reproduces":
            status = run_script(
                folder / row["id"] / "repro.py", [KNOB_BACKEND], prelude=knob.prelude, timeout=600
            ).status
        row["precision_knob"] = f"{name}: {status}" if status else ""
        row["verdict"] = verdict(row, status, name)
        print(f"{row['id']}: {row['rule']} / {row['value_class']}: {row['verdict']}", flush=True)
    (folder / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    rows = index["findings"]
    by = Counter((r["rule"], r["value_class"], r["verdict"].split(":")[0]) for r in rows)
    lines = [
        f"# Blind campaign against {index['backend']} (torch.compile backend `{index['torch_compile_backend']}`)",
        "",
        f"{index['programs']} programs from seed {index['base_seed']} ({index['seeds']}); classes "
        f"{index['classes']}; warm throughput {index['warm_programs_per_minute']} programs a minute on one core.",
        "Every finding was minimized and rerun in a fresh interpreter (`rerun`); "
        f"`precision knob`: the rerun with {name or 'no knob'}.",
        "",
        "| rule | class | verdict | findings |",
        "|---|---|---|---|",
        *(f"| {r} | {c} | {v} | {n} |" for (r, c, v), n in sorted(by.items())),
        "",
        "| finding | rule | class | rerun | precision knob | verdict | minimized message |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| [{r['id']}]({r['id']}/repro.py) | {r['rule']} | {r['value_class']} | {r['rerun']} | "
            f"{r['precision_knob'] or '-'} | {r['verdict']} | {r['minimized_message'][:200].replace('|', '/')} |"
            for r in rows
        ),
        "",
    ]
    (folder / "index.md").write_text("\n".join(lines))
    print("\n".join(lines[: 12 + len(by)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
