"""Reach of the differential tester: which real bug classes of the corpus its general generators find.

Usage (from the repository root)::

    python -m tests.fuzz_corpus.reach [--programs 240] [--base 0] [--json out.json] [--device cuda]

1. Runs the corpus (:mod:`tests.fuzz_corpus.check`) under the torch in use: which bugs reproduce.
2. Runs ``precisionkit.difftest`` on ``difftest.plan(--programs, --base)``: an eighth of the
   programs per structured generator, the rest typed. Corpus cases are never fed to it.
3. Minimizes each mismatch that could still catch a case (``precisionkit.minimize``, up to 60
   candidates) and reads the features of the minimized program and of what the rule says about it
   (``difftest.features_of``); a mismatch whose features cannot cover any signature not yet caught
   is kept as found (minimizing removes features, so it could not catch one either).
4. A reproducing corpus case counts as caught when some minimized mismatch has every feature of
   the case's *signature*: the features its bug needs (``SIGNATURES``, from the case's trigger;
   the corpus's own ``features`` also name incidental context of the report's graph).

Prints the detection table (case, reproduces here, caught, by which generator after how many
graphs) and every distinct minimized mismatch with the fp64 evidence its rule printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from precisionkit import difftest
from tests.fuzz_corpus.cases import CASES
from tests.fuzz_corpus.check import REPRODUCES, run_case

#: The features each corpus bug needs, read from its trigger. ``None``: outside the tester's rule
#: by design (undefined behaviour in C++, or a NaN's sign, which the rule does not judge).
SIGNATURES: dict[str, frozenset[str] | None] = {
    "argmin_transposed_plus_scalar": frozenset({"argmin_argmax", "transpose_input"}),
    "argmin_after_tan_inplace_transpose": frozenset({"argmin_argmax", "transpose_input", "in_place_view"}),
    "argmax_after_sin_transpose": frozenset({"argmin_argmax", "transpose_input"}),
    "argmin_after_sin_inplace_transpose": frozenset({"argmin_argmax", "transpose_input", "in_place_view"}),
    "max_dim_indices_of_transposed_sum": frozenset({"argmin_argmax", "transpose_input", "reduction"}),
    "bool_min_dim_indices": frozenset({"argmin_argmax", "bool_dtype"}),
    "nan_to_num_inf_then_long": None,  # float -> int64 of an out-of-range value: undefined in C++
    "float_floor_divide_near_integer": frozenset({"floor_divide"}),
    "minimum_negative_zero": frozenset({"min_max_signed_zero", "signed_zero"}),
    # the trigger is the simplification of v + zeros_like(v) to v at v = -0.0; the report's ceil
    # (a way to make -0.0) and reciprocal (a way to see the sign) are context, not the bug
    "ceil_add_zero_reciprocal_sign": frozenset({"add_zero", "signed_zero"}),
    "sqrt_negative_nan_sign": None,  # only the sign of a NaN differs
    "rsqrt_angle_atan_sin_nan": frozenset({"pow_exp_log", "nan_inf"}),
    "fp16_round_trip_elided": frozenset({"cast", "fp16_bf16"}),
    "index_add_into_expanded": frozenset({"index_add", "expanded_view"}),
    "fill_on_expanded_view": frozenset({"expanded_view", "in_place_view"}),
    "index_assign_arange_mod_duplicates": frozenset({"index_put", "duplicate_indices", "in_place_view"}),
    "index_put_then_add_flip": frozenset({"index_put", "flip_roll", "in_place_view"}),
    "duplicate_index_self_add": frozenset({"index_put", "duplicate_indices"}),
    "broadcast_write_on_expand_after_matmul": frozenset({"expanded_view", "index_put"}),
    "as_strided_of_strided_slice": frozenset({"as_strided"}),
    "index_add_into_permuted_input": frozenset({"index_add", "transpose_input"}),
    "cumsum_dtype_kwarg_dropped": frozenset({"cumulative", "output_dtype"}),
    "cumsum_of_full_cast_to_bool": frozenset({"cumulative", "bool_dtype"}),
    "uint8_add_wrap_then_int16": None,  # wrap-around of uint8 arithmetic: the generator keeps integers in range
    "right_shift_by_64": None,  # shift by the bit width: undefined in C++
    "left_shift_by_64": None,
    "uint8_pow_then_cos": frozenset({"integer_dtype", "pow_exp_log", "cast"}),
    "uint8_constant_neg_plus_float": None,  # uint8 negation wraps: kept out like other wrap-around
    "mul_by_nonneg_mask_nan": frozenset({"bool_dtype", "cast", "nan_inf"}),
}


#: The CUDA corpus's signatures (:mod:`tests.fuzz_corpus.cuda_cases`), in the same vocabulary.
#: ``None``: an op or operand kind no generator writes (interpolation, grid generation, a 0-dim
#: float64 tensor as an operand).
CUDA_SIGNATURES: dict[str, frozenset[str] | None] = {
    "cuda_mean_floored_transpose_output_order": frozenset({"reduction", "transpose_input", "fp16_bf16"}),
    "cuda_argmax_with_intermediate_output": frozenset({"argmin_argmax"}),
    "cuda_add_of_row_sum_beside_matmul": frozenset({"reduction", "matmul", "fp16_bf16"}),
    "cuda_lt_against_expanded_beside_matmul": frozenset({"expanded_view", "matmul", "bool_dtype"}),
    "cuda_argmax_int16_ties": frozenset({"argmin_argmax", "integer_dtype"}),
    "cuda_cumsum_down_long_rows": frozenset({"cumulative"}),  # a scan: Triton's for every cumulative op
    "cuda_scatter_sum_unmasked_atomic": frozenset({"atomic_scatter", "duplicate_indices"}),
    "cuda_gather_reads_before_scatter_add": frozenset({"atomic_scatter", "scatter_gather", "duplicate_indices"}),
    "cuda_bf16_plus_0dim_double": None,
    "cuda_bf16_quotient_ties_with_max": frozenset({"fp16_bf16", "bool_dtype", "reduction"}),
    "cuda_affine_grid_half": None,
    "cuda_nearest_upsample_bf16": None,
}


def _corpus(cases: Any = CASES) -> dict[str, str]:
    status = {}
    for case in cases:
        torch._dynamo.reset()
        status[case.id] = run_case(case)[0]
    torch._dynamo.reset()
    return status


def _row(case: Any, corpus: dict[str, str], found: list[dict[str, Any]], signatures: Any = None) -> dict[str, Any]:
    sig = (SIGNATURES if signatures is None else signatures).get(case.id)
    hit = None if sig is None else next((f for f in found if sig <= set(f["features"])), None)
    return {
        "id": case.id,
        "issue": case.issue,
        "reproduces_here": corpus[case.id] == REPRODUCES,
        "signature": "out of the rule" if sig is None else ", ".join(sorted(sig)),
        "caught": hit is not None,
        "by": "" if hit is None else f"{hit['generator']} seed {hit['seed']} (graph {hit['graph_index']})",
    }


def _reproducing(device: str, log: Any) -> tuple[Any, dict[str, frozenset[str] | None], dict[str, str], list[Any]]:
    """The device's corpus (CUDA's on cuda), its signatures, each case's status here, and the
    reproducing cases within the generators' vocabulary."""
    if torch.device(device).type == "cuda":
        from tests.fuzz_corpus.cuda_cases import CUDA_CASES

        cases: Any = CUDA_CASES
        signatures = CUDA_SIGNATURES
    else:
        cases, signatures = CASES, SIGNATURES
    corpus = _corpus(cases)
    log(f"corpus: {sum(s == REPRODUCES for s in corpus.values())}/{len(corpus)} reproduce on torch {torch.__version__}")
    wanted = [c for c in cases if corpus[c.id] == REPRODUCES and signatures.get(c.id) is not None]
    return cases, signatures, corpus, wanted


def measure(
    programs: int,
    base: int,
    max_checks: int = 60,
    log: Any = print,
    stop_when_caught: bool = False,
    device: str = "cpu",
) -> dict[str, Any]:
    """The whole measurement as one record (see the module docstring). ``stop_when_caught``: end
    the campaign once every reproducing case within the rule is caught (the test of reach).
    Programs and minimizations run in a worker interpreter (:class:`difftest.Isolated`): compiled
    code that crashes or hangs costs that program (class ``crash``), not the measurement.
    ``device="cuda"``: the CUDA corpus (:data:`CUDA_SIGNATURES`) against a CUDA campaign."""
    start = time.perf_counter()
    cases, signatures, corpus, wanted = _reproducing(device, log)
    plan = difftest.plan(programs, base, device)
    fuzz_seconds = 0.0
    counts: Counter[str] = Counter()
    found: list[dict[str, Any]] = []
    crashed: list[str] = []
    ran, interrupted = 0, False
    worker = difftest.Isolated()
    try:
        for k, (gen, seed) in enumerate(plan):
            t0 = time.perf_counter()
            case = difftest.generate(seed, gen, device=device)
            out = worker.run(case, threads=difftest.threads_for(gen, seed))
            fuzz_seconds += time.perf_counter() - t0
            counts[out.klass] += 1
            ran = k + 1
            if out.klass == "crash":
                crashed.append(f"{out.case.id}: {out.message}")
                log(f"{out.case.id}: crash: {out.message}")
            if out.klass != "mismatch":
                continue
            case = out.case
            # Minimizing only removes source features; the rule's message may add signed_zero or
            # nan_inf. A mismatch that cannot cover a signature not yet caught is kept unminimized.
            could = difftest.features_of(case, out.message) | {"signed_zero", "nan_inf"}
            open_sigs = [signatures[c.id] for c in wanted if not _row(c, corpus, found, signatures)["caught"]]
            small, said = case, out.message
            if any(sig is not None and sig <= could for sig in open_sigs):
                done = worker.minimize(case, max_checks)
                if done is not None:  # None: a candidate crashed the worker; keep the program as found
                    small, said = done
            feats = sorted(difftest.features_of(small, said))
            found.append(
                {
                    "generator": gen,
                    "seed": seed,
                    "graph_index": k + 1,
                    "message": said,
                    "original_message": out.message,
                    "minimized": small.source,
                    "was_minimized": small.source != case.source or small.inputs != case.inputs,
                    "inputs": [(i.shape, i.dtype, i.layout, i.values) for i in small.inputs],
                    "features": feats,
                    "case": small.to_json(),
                }
            )
            log(f"{case.id}: mismatch -> {', '.join(feats)}: {said[:160]}")
            if stop_when_caught and all(_row(c, corpus, found, signatures)["caught"] for c in wanted):
                break
    except KeyboardInterrupt:  # a capped run (SIGINT at its time limit) keeps what it measured
        interrupted = True
        log(f"interrupted after {ran} of {len(plan)} programs: the record holds those")
    finally:
        worker.close()
    return {
        "torch": torch.__version__,
        "graphs": ran,
        "interrupted": interrupted,
        "planned": len(plan),
        "classes": dict(counts),
        "crashed": crashed,
        "worker_restarts": worker.crashes,
        "fuzz_seconds": fuzz_seconds,
        "seconds": time.perf_counter() - start,
        "mismatches": found,
        "device": device,
        "cases": [_row(c, corpus, found, signatures) for c in cases],
    }


def case_of(found: dict[str, Any], device: str = "cpu") -> Any:
    """The program of one recorded mismatch: the case the record holds (the minimized one where it was
    minimized), else, for a record written before cases were kept, the generator's program for its seed
    (the unminimized program that mismatched)."""
    from precisionkit.repro import Case

    if found.get("case"):
        return Case.from_json(found["case"])
    return difftest.generate(int(found["seed"]), found["generator"], device=device)


def write_repros(record: dict[str, Any], out: Path, log: Any = print) -> list[dict[str, Any]]:
    """A standalone reproducer of every mismatch of a campaign record, each in ``out/<case id>/``
    (``repro.py`` and ``case.json``, :func:`precisionkit.repro.write`), run once in a fresh interpreter:
    ``reproduces`` (exit 1: the file's own rule still sees the mismatch there), ``clean`` or ``error``.
    Writes ``out/index.json`` (one row per mismatch: id, status, the file's last line and the
    features) and returns its rows."""
    from precisionkit.repro import run_script, write

    root = Path(__file__).resolve().parents[2]
    rows = []
    for found in record["mismatches"]:
        case = case_of(found, record.get("device", "cpu"))
        script = write(case, out / case.id)
        ran = run_script(script, env={"PYTHONPATH": str(root)}, cwd=root, timeout=300.0)
        rows.append(
            {
                "id": case.id,
                "status": ran.status,
                "observed": ran.last_line,
                "message": found.get("message", ""),
                "minimized": bool(found.get("was_minimized")) and bool(found.get("case")),
                "features": found["features"],
                "seconds": round(ran.seconds, 1),
            }
        )
        log(f"{case.id}: {ran.status} in {ran.seconds:.0f} s: {ran.last_line[:140]}")
    (out / "index.json").write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz_corpus.reach")
    ap.add_argument(
        "--programs", type=int, default=240, help="programs in all (difftest.plan: an eighth per structured generator)"
    )
    ap.add_argument("--base", type=int, default=0, help="first seed")
    ap.add_argument("--json", default=None, help="write the record here")
    ap.add_argument("--device", default="cpu", help="cuda: the CUDA corpus against a CUDA campaign")
    ap.add_argument(
        "--repros",
        type=Path,
        default=None,
        metavar="DIR",
        help="write a reproducer file of every mismatch under DIR and run each in a fresh interpreter",
    )
    ap.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="JSON",
        help="with --repros: take the mismatches from this earlier --json record instead of running a campaign",
    )
    ns = ap.parse_args(argv)
    if ns.record is not None:
        if ns.repros is None:
            ap.error("--record needs --repros (it only writes the reproducers of a recorded campaign)")
        try:
            recorded = json.loads(ns.record.read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--record {ns.record}: {exc}")
        if not isinstance(recorded, dict) or "mismatches" not in recorded:
            ap.error(f"--record {ns.record}: not a campaign record (no 'mismatches')")
        return _print_repros(write_repros(recorded, ns.repros), ns.repros)
    rec = measure(ns.programs, ns.base, device=ns.device)
    live = [r for r in rec["cases"] if r["reproduces_here"]]
    judged = [r for r in live if r["signature"] != "out of the rule"]
    cut = " (interrupted)" if rec["interrupted"] else ""
    print(
        f"\ntorch {rec['torch']}: {rec['graphs']} programs{cut} in {rec['fuzz_seconds']:.0f} s; classes {rec['classes']}"
    )
    print(f"{'case':40s} {'issue':>6s}  here  {'signature':45s} caught by")
    for r in rec["cases"]:
        print(
            f"{r['id']:40s} {r['issue']:6d}  {'yes ' if r['reproduces_here'] else 'no  '}  {r['signature']:45s} "
            f"{r['by'] or ('-' if r['reproduces_here'] else '')}"
        )
    caught = sum(r["caught"] for r in judged)
    print(
        f"caught {caught} of {len(judged)} reproducing cases within the rule "
        f"({len(live) - len(judged)} reproducing cases are outside it)"
    )
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump(rec, fh, indent=1, default=str)
    if ns.repros is not None:
        return _print_repros(write_repros(rec, ns.repros), ns.repros)
    return 0


def _print_repros(rows: list[dict[str, Any]], out: Path) -> int:
    counts = Counter(r["status"] for r in rows)
    print(f"reproducers in {out}: {len(rows)} ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
