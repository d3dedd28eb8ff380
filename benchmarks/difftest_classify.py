"""Classify a campaign's findings (``benchmarks/difftest_campaign.py``'s ``index.json``) as real
defect, by design or false alarm, and write ``index.md`` beside it with the table by rule and class.

Each reproducer is rerun in a fresh interpreter with the knob of its compiler that restores the
program's own precision (OpenVINO: ``INFERENCE_PRECISION_HINT=f32``, which stops its CPU default of
bf16 execution; IREE: ``keep_intermediate_roundings``, which keeps the roundings to f16/bf16 between
fused operations); the verdict, in order:

A finding the precision knob leaves is rerun once more with subnormals flushed to zero in the whole
interpreter (``torch.set_flush_denormal(True)`` before anything runs, so eager, the fp64 reference and
the compiler's threads all start flushed): a finding that is then clean is the compiler's flushing of
subnormal inputs and intermediates (IREE's CPU workers run with flush-to-zero), not a wrong value.
A crash is rerun ``--crash-reruns`` more times, each in a fresh interpreter. The verdict, in order:

* ``real defect``: a crash of the compiler's native code seen again in at least one fresh rerun (a
  flaky one says how many of how many), an output of another shape or dtype, or a finding neither
  knob removes (other than the dtype-faithful one below);
* ``by design``: a finding the precision knob removes (the compiler's documented precision setting),
  one the flush rerun removes (``by design (flush-to-zero)``), or a dtype-faithful class change of a
  float whose fused value has the fp64 reference's class (wider intermediates avoided an overflow the
  program's dtype has; a bool's change is a defect: the class test contradicts the program's own value);
* ``false alarm``: a reproducer that does not reproduce in a fresh interpreter;
* ``unconfirmed crash``: a crash no fresh rerun repeats (the count of reruns is given).

A finding no rerun can judge (eager's own value contradicting torch's documentation, a jump that a
rounding decides) is judged by a person reading its reproducer, in the folder's ``review.json``
(finding id to verdict and reason); that verdict replaces the classifier's, which stays in
``index.json`` as ``auto_verdict``.

    .venv/bin/python benchmarks/difftest_classify.py results/campaigns/<date>-openvino
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # the campaign script's value_class

#: the knob that restores the program's own precision, per adapter
PRECISION_KNOB = {
    "openvino": "INFERENCE_PRECISION_HINT=f32 (no bf16/f16 execution)",
    "iree": "keep_intermediate_roundings",
}

#: the rerun with subnormals flushed to zero in the whole interpreter, before torch runs anything (the
#: threads torch and the compiler start later inherit the flag)
FLUSH_KNOB = "flush_denormal"
FLUSH_PRELUDE = "import torch\ntorch.set_flush_denormal(True)\n"

#: a campaign folder's verdicts read off the reproducers by a person, by finding id: they replace the
#: classifier's (kept as ``auto_verdict``), e.g. a false alarm no rerun can tell (a reference's own quirk)
REVIEW = "review.json"

#: fresh reruns a crash gets beyond the campaign's own one
CRASH_RERUNS = 4


def _kind(text: str) -> str:
    t = text.strip().lower()
    if t in ("nan", "inf", "-inf"):
        return t
    try:
        v = float(t)
    except ValueError:
        return t
    return "zero" if v == 0 else "finite"


def crash_verdict(row: dict) -> str:
    """A crash's verdict from its fresh reruns: the campaign's own (``rerun_returncode``) and the
    classifier's (``crash_reruns``, return codes); a death by a signal in any is the compiler's."""
    codes = [row["rerun_returncode"], *row.get("crash_reruns", [])]
    died = sum(1 for c in codes if c < 0)
    if died == len(codes):
        return f"real defect: the compiler's native code crashed, again in {died} of {len(codes)} fresh interpreters"
    if died:
        return f"real defect: a flaky native crash of the compiler, again in {died} of {len(codes)} fresh interpreters"
    return (
        f"unconfirmed crash: none of {len(codes)} fresh interpreters crashed; the first ended "
        f"{row['rerun']} ({row['rerun_line'][:80]})"
    )


def verdict(row: dict, knob_status: str, knob: str, flush_status: str = "") -> str:
    if row["class"] == "crash":
        return crash_verdict(row)
    if row["rerun"] != "reproduces":
        return f"false alarm: the reproducer is {row['rerun']} in a fresh interpreter"
    if row["value_class"] == "shape or dtype":
        return "real defect: an output of another dtype or shape"
    if knob_status == "clean":
        return f"by design: {knob} removes it (the compiler's precision setting)"
    if flush_status == "clean":
        return (
            "by design (flush-to-zero): clean with subnormals flushed in eager too (torch.set_flush_denormal): "
            "fused equals eager with subnormal inputs and intermediates flushed to zero"
        )
    m = re.search(r"fused \([^)]*\) ([^,]+), dtype-faithful ([^,]+), fp64 ([^;]+)$", row["minimized_message"])
    widened = m is not None and m.group(1) not in ("True", "False") and _kind(m.group(1)) == _kind(m.group(3))
    if row["rule"] == "dtype-faithful" and widened:
        return "by design: wider intermediates avoid an overflow of the program's dtype (fp64 sides with fused)"
    return "real defect: not removed by the compiler's precision setting nor by flushing subnormals"


#: the smallest normal float32: below it (and at 0) a value is one that flushing subnormals can make
TINY = 1.1754943508222875e-38


def near_zero(message: str) -> bool:
    """Whether a finding's message shows a zero or a float32 subnormal at the element it names (eager,
    fused or fp64): the findings the flush rerun is run for (a wrong value far from zero on every side
    is not made by flushing an output, and the rerun costs a compile)."""
    m = re.search(r"eager (\S+), fused \([^)]*\) (\S+), (?:dtype-faithful \S+, )?fp64 (\S+)$", message)
    if m is None:
        return False
    values = []
    for text in m.groups():
        try:
            values.append(abs(float(text)))
        except ValueError:
            continue
    return any(v < TINY for v in values)


def _sixteen_bit(case_json: Path) -> bool:
    """Whether a program holds a float16 or bfloat16 value (an input, a cast or a dtype argument)."""
    text = case_json.read_text()
    return "float16" in text


def rerun_finding(folder: Path, row: dict, knob: Any, name: str, crash_reruns: int) -> None:
    """A finding's fresh reruns, recorded in its row: a crash ``crash_reruns`` times as found; a
    reproducing mismatch with the precision knob, and where that leaves it, with subnormals flushed.
    IREE's knob (the roundings to 16-bit types kept) is not run on a program without a 16-bit value,
    nor (on another compiler than IREE, whose runtime flushes subnormals: a flushed intermediate may
    show as any value, log(0) = -inf say) the flush rerun where the message shows no zero or
    subnormal (:func:`near_zero`)."""
    from precisionkit.bisect import KNOB_BACKEND
    from precisionkit.repro import run_script

    script = folder / row["id"] / "repro.py"
    row["precision_knob"], row["flush_denormal"] = "", ""
    if row["class"] == "crash":
        runs = [run_script(script, timeout=600, cwd=script.parent) for _ in range(crash_reruns)]
        row["crash_reruns"] = [r.returncode for r in runs]
        return
    if row["rerun"] != "reproduces" or row["value_class"] == "shape or dtype":
        return
    if knob is not None and name == PRECISION_KNOB["iree"] and not _sixteen_bit(script.parent / "case.json"):
        row["precision_knob"] = f"{name}: not run (no 16-bit value)"
    elif knob is not None:
        status = run_script(script, [KNOB_BACKEND], prelude=knob.prelude, timeout=600).status
        row["precision_knob"] = f"{name}: {status}"
        if status == "clean":
            return
    if name != PRECISION_KNOB["iree"] and not near_zero(row["minimized_message"]):
        row["flush_denormal"] = "not run (no zero or subnormal at the element)"
        return
    row["flush_denormal"] = run_script(script, prelude=FLUSH_PRELUDE, timeout=600, cwd=script.parent).status


def index_md(index: dict, name: str) -> list[str]:
    """index.md's lines: the campaign, the table by rule, class and verdict, one row per finding."""
    rows = index["findings"]
    by = Counter((r["rule"], r["value_class"], r["verdict"].split(":")[0]) for r in rows)
    return [
        f"# Blind campaign against {index['backend']} (torch.compile backend `{index['torch_compile_backend']}`)",
        "",
        f"{index['programs']} programs from seed {index['base_seed']} ({index['seeds']}); classes "
        f"{index['classes']}; warm throughput {index['warm_programs_per_minute']} programs a minute on one core.",
        f"Findings reproduced: {index.get('findings_reproduced', len(rows))}, each minimized with at most "
        f"{index.get('minimize_checks', 40)} candidate checks (a row with minimized false was written as found).",
        "Every finding was minimized and rerun in a fresh interpreter (`rerun`); "
        f"`precision knob`: the rerun with {name or 'no knob'}; `flush`: the rerun with subnormals flushed "
        "to zero in the whole interpreter (torch.set_flush_denormal(True)), where the precision knob left it; "
        f"`(reviewed)`: the verdict of {REVIEW}, a person's reading of the reproducer (the classifier's is in "
        "index.json as auto_verdict).",
        "",
        "| rule | class | verdict | findings |",
        "|---|---|---|---|",
        *(f"| {r} | {c} | {v} | {n} |" for (r, c, v), n in sorted(by.items())),
        "",
        "| finding | rule | class | rerun | precision knob | flush | verdict | minimized message |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| [{r['id']}]({r['id']}/repro.py) | {r['rule']} | {r['value_class']} | {r['rerun']} | "
            f"{r.get('precision_knob') or '-'} | {r.get('flush_denormal') or '-'} | {r['verdict']}"
            f"{' (reviewed)' if 'auto_verdict' in r else ''} | "
            f"{'' if r.get('minimized', True) else '(as found) '}{r['minimized_message'][:200].replace('|', '/')} |"
            for r in rows
        ),
        "",
    ]


#: the rerun results a row holds (kept in index.json and, while a campaign still writes that, in reruns.json)
RERUN_KEYS = ("precision_knob", "flush_denormal", "crash_reruns")
RERUNS = "reruns.json"


def follow(folder: Path, knob: Any, name: str, crash_reruns: int) -> None:
    """Rerun each finding as the campaign writes it, into reruns.json only (the campaign rewrites
    index.json after each finding), until every finding the campaign found has its reruns."""
    import time

    while True:
        index = json.loads((folder / "index.json").read_text())
        saved = json.loads((folder / RERUNS).read_text()) if (folder / RERUNS).exists() else {}
        todo = [r for r in index["findings"] if r["id"] not in saved]
        for row in todo:
            rerun_finding(folder, row, knob, name, crash_reruns)
            saved[row["id"]] = {k: row[k] for k in RERUN_KEYS if k in row}
            (folder / RERUNS).write_text(json.dumps(saved, indent=2) + "\n")
            print(f"{row['id']}: reruns {saved[row['id']]}", flush=True)
        reproduced = str(index.get("findings_reproduced", "0 of 0")).split(" of ")
        if not todo and reproduced[0] == reproduced[1]:
            return
        if not todo:
            time.sleep(30)


def judge(row: dict, name: str, review: dict) -> None:
    """A row's class of value (again from its message) and its verdict from its reruns (``not
    classified`` where they were never run), a reviewed one in its place where review.json holds it."""
    from difftest_campaign import value_class

    if row["class"] != "crash":
        row["value_class"] = value_class(row["message"])
    status, flush = row.get("precision_knob", "").rpartition(": ")[2], row.get("flush_denormal", "")
    row["verdict"] = verdict(row, status, name, flush)
    needs = row["class"] == "crash" or (row["rerun"] == "reproduces" and row["value_class"] != "shape or dtype")
    if needs and not any(k in row for k in RERUN_KEYS):
        row["verdict"] = "not classified: its knob reruns were not run (--no-knob)"
    row.pop("auto_verdict", None)
    if row["id"] in review:  # a person's reading of the reproducer, the classifier's kept beside it
        row["auto_verdict"], row["verdict"] = row["verdict"], review[row["id"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--no-knob", action="store_true", help="judge from the reruns already recorded, running none")
    ap.add_argument("--again", action="store_true", help="rerun findings whose reruns are already recorded")
    ap.add_argument("--crash-reruns", type=int, default=CRASH_RERUNS, help="fresh reruns of each crash")
    ap.add_argument("--follow", action="store_true", help="rerun findings as a running campaign writes them")
    ns = ap.parse_args(argv)
    from precisionkit.bisect import _adapter_knobs

    folder = Path(ns.folder).resolve()  # each rerun runs in its finding's folder
    index = json.loads((folder / "index.json").read_text())
    name = PRECISION_KNOB.get(index["backend"], "")
    knob = next((k for k in _adapter_knobs(index["torch_compile_backend"]) if k.name == name), None)
    if ns.follow:
        follow(folder, knob, name, ns.crash_reruns)
        return 0
    review = json.loads((folder / REVIEW).read_text()) if (folder / REVIEW).exists() else {}
    saved = json.loads((folder / RERUNS).read_text()) if (folder / RERUNS).exists() else {}
    for row in index["findings"]:
        row.update(saved.get(row["id"], {}))
        if not ns.no_knob and (ns.again or not any(k in row for k in RERUN_KEYS)):
            rerun_finding(folder, row, knob, name, ns.crash_reruns)
        judge(row, name, review)
        print(f"{row['id']}: {row['rule']} / {row['value_class']}: {row['verdict']}", flush=True)
        (folder / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    lines = index_md(index, name)
    (folder / "index.md").write_text("\n".join(lines))
    print(
        "\n".join(
            lines[
                : lines.index(
                    "| finding | rule | class | rerun | precision knob | flush | verdict | minimized message |"
                )
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
