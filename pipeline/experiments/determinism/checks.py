"""Task A's checks on ``determinism_summary``: the three §3.3 claims under their rules (one output
hash per round, 0 ULP within a round, the cold start reproducing H_k0 and round 1's bits), the run's
validity (its fusion part is generated from the record's declaration, ``spec.FUSION``) and the thread-count
finding.

A row whose FFN the compiler did not fuse (``not_fused``: it ran the graph in torch after failing it, as
OpenVINO does a bfloat16 one) says nothing about a fused program: the claims judge the fused rows only and
name the others with their reason; with no fused row they are inconclusive. Where the compiler exposes no
kernel binary, the cold-start claim's artifact part is not applicable (its reason in the row) and the
compiled program is compared by its code hash.
"""

import dagster as dg
import polars as pl

from ...resources import ExperimentSettings
from ...scalars import as_int
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .rounds import DETERMINISM_DTYPES, THREAD_ROUND_RUNS, thread_round_skipped
from .spec import ID

SUMMARY = dg.AssetKey("determinism_summary")

_SAMPLE = (
    "one fixed seeded FFN input per dtype (fp16 headline, bf16 and fp32 extra rows); "
    "the profile's runs per round and dtype (spec.py) in round 1 and in the cold round (1000 each in the seed "
    f"profile; the default profile's cold round runs fewer, cold_runs), min(cold runs, {THREAD_ROUND_RUNS}) in the "
    "thread-count round, which runs on the CPU only; the "
    "smoke profile runs no cold round (cold_start in spec.py), so there the cold-start claim is inconclusive"
)

RULE_ONE_HASH = Rule(
    claim="§3.3: with compile-time and runtime inputs unchanged, every run of the fused FFN first half gives the same output bits",
    metric="distinct md5 hashes of the raw output bytes per dtype x round, minus one",
    decision="contradicted when any dtype x round (any process, any thread count) has more than one output hash; "
    "supported when every row has exactly one; inconclusive when the table has no row",
    threshold=0,
    unit="extra distinct output hashes",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the claim is exact (binary consistency), so any second hash contradicts it; no statistics: a "
    "single differing run is a counterexample",
)

RULE_ZERO_ULP = Rule(
    claim="§3.3: the runs of one round do not differ by even one ULP (the seed's table: max ULP diff 0)",
    metric="max ULP distance between each run's output and the round's first output, per dtype x round",
    decision="contradicted when any dtype x round has a max ULP distance above 0; inconclusive when some distance "
    "is unknown (more distinct outputs than the worker keeps) and none measured is above 0, or the table is "
    "empty; supported when every distance is 0",
    threshold=0,
    unit="ULP",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the seed's expected row is run count / 1 / 0: any non-zero distance contradicts an exact claim",
)

RULE_COLD_START = Rule(
    claim="§3.3: a cold start (fresh process, empty and disabled compiler caches, same threads) recompiles to the "
    "same kernel binaries (artifact hash H_k0) and reproduces round 1's output bits",
    metric="per dtype: sha256 of the loaded sections of the compiled artifacts of the cold round vs H_k0 (round 1: "
    "CPU shared objects; Triton cubins and autotuning choices on CUDA), sha256 of the normalized generated source "
    "(cache paths and cache settings removed) vs round 1's, and the output hash set vs round 1's",
    decision="contradicted when, for any dtype, the cold round's artifact hash differs from H_k0, its source hash "
    "differs from round 1's, or its outputs differ from round 1's; inconclusive when there is no cold round row, "
    "or when nothing differs but a kernel binary of either round could not be read; supported otherwise",
    threshold=0,
    unit="dtypes whose code hash or output bits changed across the cold start",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the seed's steps 1, 4-5: H_k0 is the fusion kernel binary hash, and the second round's kernel hash "
    "should equal it and its output md5 round 1's; all are exact equalities",
)


def _rows(frame: pl.DataFrame) -> str:
    return ", ".join(f"{r['dtype']}/{r['round']}" for r in frame.iter_rows(named=True)) or "none"


def fused_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The rows that ran a fused program, and the others named with why the compiler did not fuse them
    ("none" when every row fused; a table stored before the column has only fused rows)."""
    if "not_fused" not in frame.columns:
        return frame, "none"
    left = frame.filter(pl.col("not_fused").is_not_null())
    named = "; ".join(f"{r['dtype']}/{r['round']}: {r['not_fused']}" for r in left.iter_rows(named=True))
    return frame.filter(pl.col("not_fused").is_null()), named or "none"


def _with_left(reason: str, left: str) -> str:
    """A claim's reason, with the rows the compiler did not fuse named as not judged."""
    return reason if left == "none" or reason.startswith("no row ran") else f"{reason}; not judged, not fused: {left}"


def _none_fused(frame: pl.DataFrame, left: str) -> str | None:
    """Why a claim cannot be judged when the table has rows but none ran a fused program, else None."""
    return f"no row ran a fused program ({left})" if frame.height == 0 and left != "none" else None


def _measured(frame: pl.DataFrame) -> str:
    """The measured source of every difference in ``frame``'s rows (``difference_source``)."""
    parts = [
        f"{r['dtype']}/{r['round']}: {r['difference_source']}"
        for r in frame.iter_rows(named=True)
        if r["difference_source"] not in (None, "none")
    ]
    return "; ".join(parts) or "none"


def _artifact_moved(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows whose kernel binaries differ from the first cold start's (H_k0)."""
    return frame.filter(pl.col("artifact_hash_equal_across_cold_start") == "no")


def _artifact_unread(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows whose kernel binaries (of this round or round 1) could not be read: not compared."""
    return frame.filter(pl.col("artifact_hash_equal_across_cold_start").str.starts_with("unknown"))


@claim_check(
    rule=RULE_ONE_HASH,
    asset=SUMMARY,
    description="Claim (§3.3): each round (fresh or not, any thread count) produced exactly one output hash per dtype.",
)
def one_output_hash_per_round(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    determinism_summary, left = fused_rows(determinism_summary)
    bad = determinism_summary.filter(pl.col("unique_output_hashes") != 1)
    if (none := _none_fused(determinism_summary, left)) is not None:
        verdict, reason = INCONCLUSIVE, none
    elif determinism_summary.height == 0:
        verdict, reason = INCONCLUSIVE, "the summary has no row"
    elif bad.height:
        verdict, reason = CONTRADICTED, f"several output hashes in {_rows(bad)}"
    else:
        verdict, reason = SUPPORTED, f"one output hash in each of {determinism_summary.height} dtype x round rows"
    return claim_result(
        verdict,
        RULE_ONE_HASH,
        _with_left(reason, left),
        {
            "rows_with_several_hashes": _rows(bad),
            "max_unique_hashes": as_int(determinism_summary["unique_output_hashes"].max() or 0, "unique_output_hashes"),
            "measured_source": _measured(bad),
            "rows_not_fused": left,
        },
    )


@claim_check(
    rule=RULE_ZERO_ULP,
    asset=SUMMARY,
    description="Claim (§3.3): max ULP distance between runs of a round is 0 for every dtype and round.",
)
def zero_ulp_within_round(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    determinism_summary, left = fused_rows(determinism_summary)
    col = pl.col("max_ulp_diff_across_runs")
    above = determinism_summary.filter(col.is_not_null() & (col != 0))
    unknown = determinism_summary.filter(col.is_null())
    if (none := _none_fused(determinism_summary, left)) is not None:
        verdict, reason = INCONCLUSIVE, none
    elif above.height:
        verdict, reason = (
            CONTRADICTED,
            f"runs differ by up to {as_int(above['max_ulp_diff_across_runs'].max(), 'max_ulp_diff_across_runs')} ULP in {_rows(above)}",
        )
    elif unknown.height or determinism_summary.height == 0:
        verdict, reason = (
            INCONCLUSIVE,
            (
                f"ULP distance unknown in {_rows(unknown)} (more distinct outputs than kept)"
                if unknown.height
                else "the summary has no row"
            ),
        )
    else:
        verdict, reason = SUPPORTED, f"0 ULP between runs in each of {determinism_summary.height} dtype x round rows"
    return claim_result(
        verdict,
        RULE_ZERO_ULP,
        _with_left(reason, left),
        {
            "rows_not_zero": _rows(above),
            "rows_unknown": _rows(unknown),
            "measured_source": _measured(pl.concat([above, unknown])),
            "rows_not_fused": left,
        },
    )


@claim_check(
    rule=RULE_COLD_START,
    asset=SUMMARY,
    description="Claim (§3.3): cold start (fresh process, empty cache, same threads) recompiles to kernel binaries with "
    "artifact hash H_k0, the same generated source, and round 1's output bits.",
)
def cold_start_reproduces_round1(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    fused, left = fused_rows(determinism_summary)
    cold = fused.filter(pl.col("round") == "round2_cold")
    code_bad = cold.filter(pl.col("kernel_hash_equal_across_cold_start") != "yes")
    artifact_bad = _artifact_moved(cold)
    out_bad = cold.filter(pl.col("outputs_equal_round1") != "yes")
    unread = _artifact_unread(cold)
    # a compiler that exposes no kernel binary: the artifact part does not apply, the code hash stands for it
    na = cold.filter(pl.col("artifact_hash_equal_across_cold_start").str.starts_with("not applicable"))
    artifact_part = na["artifact_hash_equal_across_cold_start"][0] if na.height else "compared"
    if (none := _none_fused(fused, left)) is not None:
        verdict, reason = INCONCLUSIVE, none
    elif cold.height == 0:
        verdict, reason = INCONCLUSIVE, "no cold-start round in the summary"
    elif code_bad.height or artifact_bad.height or out_bad.height:
        verdict, reason = (
            CONTRADICTED,
            (
                f"artifact hash differs from H_k0: {_rows(artifact_bad)}; source hash differs from "
                f"round 1: {_rows(code_bad)}; outputs differ from round 1: {_rows(out_bad)}"
            ),
        )
    elif unread.height:
        # Source and outputs reproduced, but a kernel binary was not read: H_k0 is not compared.
        verdict, reason = (
            INCONCLUSIVE,
            f"round 1's source hash and output bits reproduced for {cold.height} dtypes, but the kernel binaries "
            f"could not be compared for {_rows(unread)}",
        )
    elif na.height:
        verdict, reason = (
            SUPPORTED,
            f"round 1's source hash and output bits reproduced for {cold.height} dtypes (artifact hash: {artifact_part})",
        )
    else:
        verdict, reason = (
            SUPPORTED,
            (f"artifact hash H_k0, round 1's source hash and output bits reproduced for {cold.height} dtypes"),
        )
    return claim_result(
        verdict,
        RULE_COLD_START,
        _with_left(reason, left),
        {
            "cold_rows": cold.height,
            "artifact_hash": artifact_part,
            "rows_not_fused": left,
            "artifact_hash_differs": _rows(artifact_bad),
            "artifact_not_compared": _rows(unread),
            "code_hash_differs": _rows(code_bad),
            "outputs_differ": _rows(out_bad),
            "measured_source": _measured(cold),
        },
    )


@validity_check(
    asset=SUMMARY,
    description="Run validity: every round ran its planned number of runs for every dtype (that each run was "
    "one fused program is the generated check determinism_summary_shows_fusion).",
)
def every_round_ran_its_planned_runs(
    determinism_summary: pl.DataFrame, settings: ExperimentSettings
) -> dg.AssetCheckResult:
    sizes = settings.sizes(ID)
    runs = sizes.runs_by_dtype(DETERMINISM_DTYPES)
    planned = {"round1": runs}
    if sizes.cold_start:
        cold = sizes.cold_runs_by_dtype(DETERMINISM_DTYPES)
        planned["round2_cold"] = cold
        if thread_round_skipped(settings.torch_device().type) is None:
            planned["cold_threads"] = {d: min(n, THREAD_ROUND_RUNS) for d, n in cold.items()}
    problems = []
    # a row the compiler did not fuse still ran its rounds (the fallback's): named here, judged by no claim
    _, left = fused_rows(determinism_summary)
    for name, counts in planned.items():
        got = determinism_summary.filter(pl.col("round").str.starts_with(name))
        if got.height != len(DETERMINISM_DTYPES):
            problems.append(f"{name}: {got.height} dtype rows, planned {len(DETERMINISM_DTYPES)}")
        for dtype, n in counts.items():
            short = got.filter((pl.col("dtype") == dtype) & (pl.col("run_count") != n))
            if short.height:
                problems.append(f"{name}: run counts {short['run_count'].to_list()} instead of {n} in {_rows(short)}")
    return validity_result(
        problems,
        {
            "planned_runs_per_round": sizes.runs,
            "planned_runs_by_dtype": ", ".join(f"{d}={n}" for d, n in runs.items()),
            "planned_rounds": ", ".join(planned),
            "rows_not_fused": left,
        },
    )


@finding_check(
    asset=SUMMARY,
    description="Finding: outputs with another CPU thread count compared with round 1 bit for bit (WARN when they "
    "differ; §3.3 fixes the runtime, so another thread count is outside its claim).",
)
def thread_count_output_comparison(
    determinism_summary: pl.DataFrame, settings: ExperimentSettings
) -> dg.AssetCheckResult:
    fused, left = fused_rows(determinism_summary)
    alt = fused.filter(pl.col("round").str.starts_with("cold_threads"))
    differ = alt.filter(pl.col("outputs_equal_round1") != "yes")
    code_differs = alt.filter(pl.col("kernel_hash_equal_across_cold_start") != "yes")
    findings = []
    # A profile without cold-start rounds plans no thread-count round, and neither does a run on an
    # accelerator (the round changes CPU threads only): nothing to report then.
    skipped = thread_round_skipped(settings.torch_device().type)
    if alt.height == 0 and settings.sizes(ID).cold_start and skipped is None:
        findings.append("no thread-count round in the summary")
    if differ.height:
        findings.append(f"outputs differ from round 1 with another thread count: {_rows(differ)}")
    return finding_result(
        findings,
        {
            "rows": alt.height,
            "thread_count_round": skipped or "runs on the CPU",
            "outputs_differ": _rows(differ),
            "max_ulp_vs_round1": ", ".join(f"{r['dtype']}={r['max_ulp_vs_round1']}" for r in alt.iter_rows(named=True)),
            "code_differs_from_round1": _rows(code_differs),
            "artifact_differs_from_H_k0": _rows(_artifact_moved(alt)),
            "measured_source": _measured(alt),
            "rows_not_fused": left,
        },
    )
