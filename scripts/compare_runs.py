"""Compare two materializations of the pipeline, e.g. the same profile from an old and a new tree:
stored values bit for bit, check results, and the generated report pages.

    python scripts/compare_runs.py OLD_DATA NEW_DATA [--old-home H1 --new-home H2] [--old-docs D1 --new-docs D2]

OLD_DATA and NEW_DATA are profile folders (``data/<profile>``). Columns and metadata that measure
time, name paths or hosts (``*seconds*``, ``*_ms``, ``path``, ...) are left out. Prints one line per
difference and exits 1 when there is any.
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

VOLATILE = re.compile(
    r"(second|_ms$|^ms_|elapsed|time|path|host|pid|duration|timestamp|run_id|cache|dir$|sha256_of_)", re.I
)


def _tables(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.iterdir()) if p.suffix in (".parquet", ".json", ".safetensors")}


def _cmp_parquet(a: Path, b: Path) -> list[str]:
    import polars as pl

    x, y = pl.read_parquet(a), pl.read_parquet(b)
    keep = [c for c in x.columns if not VOLATILE.search(c)]
    if [c for c in y.columns if not VOLATILE.search(c)] != keep:
        return [f"{a.name}: columns differ: {x.columns} vs {y.columns}"]
    if x.height != y.height:
        return [f"{a.name}: {x.height} rows vs {y.height}"]
    out = []
    for c in keep:
        if not x[c].equals(y[c]):
            diff = (x[c].cast(pl.String) != y[c].cast(pl.String)).fill_null(True)
            out.append(f"{a.name}: column {c} differs in {int(diff.sum())} rows")
    return out


def _cmp_json(a: Path, b: Path) -> list[str]:
    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(w) for k, w in v.items() if not VOLATILE.search(str(k))}
        if isinstance(v, list):
            return [clean(w) for w in v]
        return v

    return [] if clean(json.loads(a.read_text())) == clean(json.loads(b.read_text())) else [f"{a.name}: records differ"]


def _cmp_tensors(a: Path, b: Path) -> list[str]:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    if set(x) != set(y):
        return [f"{a.name}: tensor names differ"]
    return [f"{a.name}: {k} differs" for k in sorted(x) if x[k].dtype != y[k].dtype or not x[k].equal(y[k])]


def compare_data(old: Path, new: Path) -> list[str]:
    a, b = _tables(old), _tables(new)
    out = [f"only in {old}: {n}" for n in sorted(set(a) - set(b))] + [
        f"only in {new}: {n}" for n in sorted(set(b) - set(a))
    ]
    for name in sorted(set(a) & set(b)):
        cmp = {".parquet": _cmp_parquet, ".json": _cmp_json, ".safetensors": _cmp_tensors}[a[name].suffix]
        out += cmp(a[name], b[name])
    return out


def _checks(home: Path) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    import os

    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    from pipeline.definitions import defs
    from pipeline.runs import plain

    instance = dg.DagsterInstance.get()
    out = {}
    for key in defs.resolve_asset_graph().asset_check_keys:
        record = instance.get_latest_asset_check_evaluation_record(key)
        event = record.event.dagster_event if record and record.event else None
        data = event.event_specific_data if event else None
        if isinstance(data, dg.AssetCheckEvaluation):
            meta = {k: v for k, v in plain(data.metadata).items() if not VOLATILE.search(k)}
            out[key.to_user_string()] = (data.passed, str(data.severity), meta)
    return out


def compare_checks(old_home: Path, new_home: Path) -> list[str]:
    import subprocess

    def load(home: Path) -> dict[str, Any]:
        code = (
            "import json, sys; sys.path.insert(0, 'scripts'); import compare_runs as c; "
            f"print(json.dumps(c._checks(__import__('pathlib').Path({str(home)!r})), default=str))"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    a, b = load(old_home), load(new_home)
    out = [f"check only in old: {k}" for k in sorted(set(a) - set(b))] + [
        f"check only in new: {k}" for k in sorted(set(b) - set(a))
    ]
    for k in sorted(set(a) & set(b)):
        if a[k][:2] != b[k][:2]:
            out.append(f"{k}: {a[k][:2]} vs {b[k][:2]}")
        elif a[k][2] != b[k][2]:
            keys = sorted(x for x in set(a[k][2]) | set(b[k][2]) if a[k][2].get(x) != b[k][2].get(x))
            out.append(f"{k}: metadata differs in {keys}")
    return out


def compare_pages(old_docs: Path, new_docs: Path) -> list[str]:
    strip = re.compile(
        r"(\d+(\.\d+)? ?(s|ms|min)\b|20\d\d-\d\d-\d\d[ T][\d:]+( UTC)?|[0-9a-f]{12,40}(\+dirty)?|run [0-9a-f-]{8,})"
    )
    out = []
    a = {p.relative_to(old_docs): p for p in old_docs.rglob("*.md")}
    b = {p.relative_to(new_docs): p for p in new_docs.rglob("*.md")}
    out += [f"page only in old: {p}" for p in sorted(set(a) - set(b))] + [
        f"page only in new: {p}" for p in sorted(set(b) - set(a))
    ]
    for rel in sorted(set(a) & set(b)):
        x, y = strip.sub("#", a[rel].read_text()), strip.sub("#", b[rel].read_text())
        if x != y:
            lx, ly = x.splitlines(), y.splitlines()
            n = sum(
                1
                for i in range(max(len(lx), len(ly)))
                if (lx[i] if i < len(lx) else None) != (ly[i] if i < len(ly) else None)
            )
            out.append(f"page {rel}: {n} lines differ")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--old-home", type=Path)
    parser.add_argument("--new-home", type=Path)
    parser.add_argument("--old-docs", type=Path)
    parser.add_argument("--new-docs", type=Path)
    args = parser.parse_args(argv)
    diffs = compare_data(args.old, args.new)
    if args.old_home and args.new_home:
        diffs += compare_checks(args.old_home, args.new_home)
    if args.old_docs and args.new_docs:
        diffs += compare_pages(args.old_docs, args.new_docs)
    for d in diffs:
        print(d)
    print(f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
