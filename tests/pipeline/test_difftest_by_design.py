"""The differential tester's by-design mismatches: a program the diff rule flags that is clean when rerun
with the compiler's faithful-casts options (Inductor: emulate_precision_casts) is labelled by design, listed
apart on the claim, the finding and the page, and contradicts nothing; every other mismatch still does."""

import dagster as dg
import polars as pl
import pytest

from pipeline.instruments.diagnostics.difftesting import (
    MIN_PROGRAMS_FOR_SUPPORTED,
    NO_16_BIT,
    difftest_programs_agree,
    judge_difftest,
    relabel_by_design,
)
from pipeline.instruments.diagnostics.fuzzing import judge_fuzz
from pipeline.instruments.diagnostics.report import difftest_section
from pipeline.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from precisionkit import difftest
from precisionkit.backends import get_adapter

REASON = "Inductor's elided 16-bit rounding: clean with emulate_precision_casts"


def _table(classes: list[str], by_design: dict[int, str] | None = None) -> pl.DataFrame:
    by_design = by_design or {}
    return pl.DataFrame(
        {
            "id": [f"typed-{i}-float16" for i in range(len(classes))],
            "generator": ["typed"] * len(classes),
            "class": classes,
            "features": ["cast"] * len(classes),
            "message": [f"{c} message {i}" for i, c in enumerate(classes)],
            "by_design": [by_design.get(i, "") for i in range(len(classes))],
        }
    )


def test_a_real_mismatch_contradicts_and_a_by_design_one_is_listed_apart():
    table = _table(["ok"] * 46 + ["mismatch", "by_design"], {47: REASON})
    verdict, reason, meta = judge_difftest(table)
    assert verdict == CONTRADICTED
    assert reason.startswith("1 of 47 compared programs have a wrong fused result (1 more by design, counted apart)")
    assert "first typed-46-float16: mismatch message 46" in reason and "typed-47" not in reason
    assert (meta["programs"], meta["compared"], meta["mismatches"], meta["by_design"]) == (48, 47, 1, 1)
    assert meta["wrong_results"].value == "- `typed-46-float16` (cast): mismatch message 46"
    assert meta["by_design_results"].value == (
        f"- `typed-47-float16` (cast): by_design message 47 (by design: {REASON})"
    )


def test_only_by_design_mismatches_contradict_nothing_and_are_not_compared():
    # 45 clean programs and 5 by design: by design is no evidence of correctness, so 45 are compared
    table = _table(["ok"] * 45 + ["by_design"] * 5, {i: REASON for i in range(45, 50)})
    verdict, reason, meta = judge_difftest(table)
    assert verdict == SUPPORTED and (meta["compared"], meta["mismatches"], meta["by_design"]) == (45, 0, 5)
    assert reason.startswith("no mismatch in 45 compared programs (5 more by design, counted apart)")
    assert meta["wrong_results"].value == "none"
    assert meta["by_design_results"].value.count("(by design: ") == 5
    # below the minimum once the by-design ones are left out: inconclusive, not supported
    few = _table(["ok"] * (MIN_PROGRAMS_FOR_SUPPORTED - 1) + ["by_design"] * 3)
    verdict, reason, meta = judge_difftest(few)
    assert verdict == INCONCLUSIVE and meta["compared"] == MIN_PROGRAMS_FOR_SUPPORTED - 1 and meta["by_design"] == 3
    assert reason == (
        f"no mismatch (3 more by design, counted apart), but only {MIN_PROGRAMS_FOR_SUPPORTED - 1} programs "
        f"compared (< {MIN_PROGRAMS_FOR_SUPPORTED})"
    )


def test_the_finding_and_the_page_show_the_by_design_mismatches_apart_with_their_reason():
    table = _table(["ok", "ok", "mismatch", "by_design", "crash"], {3: REASON})
    result = difftest_programs_agree(difftest_outcomes=table)
    assert isinstance(result, dg.AssetCheckResult)
    meta = {k: v.value for k, v in result.metadata.items()}
    assert (meta["findings"], meta["by_design"]) == (2, 1)
    assert meta["details"] == (
        f"typed-4-float16: crash: crash message 4; typed-3-float16: by design ({REASON}): by_design message 3"
    )
    assert meta["classes"] == "by_design=1, crash=1, mismatch=1, ok=2"
    page = difftest_section(table)
    assert "| generator | ok | by_design | crash | mismatch |" in page and "| typed | 2 | 1 | 1 | 1 |" in page
    listed, apart = page.split("### By design (1)")
    assert "typed-2-float16" in listed and "typed-4-float16" in listed and "typed-3-float16" not in listed
    assert f"| typed-3-float16 | cast | by_design message 3 | {REASON} |" in apart
    # a table stored before the rerun existed (no by_design column) reads as before
    old = table.drop("by_design").filter(pl.col("class") != "by_design")
    assert "### By design" not in difftest_section(old)
    assert judge_difftest(old)[2]["by_design"] == 0


def test_the_fuzzer_has_no_by_design_graphs():
    fuzz = pl.DataFrame({"class": ["ok"] * 40, "seed": list(range(40))})
    verdict, _, meta = judge_fuzz(fuzz)
    assert verdict == SUPPORTED and (meta["compared"], meta["by_design"]) == (40, 0)


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        ("openvino", "not applicable to OpenVINO: OpenVINO removes a narrowing cast pair"),
        ("iree", "IREE keeps every cast between fused operations by default: its run was faithful"),
        ("pk_no_such_backend", "no compiler adapter for backend 'pk_no_such_backend' here: no faithful-casts rerun"),
    ],
)
def test_nothing_is_relabelled_where_the_compiler_has_no_faithful_casts_rerun(backend, why):
    if backend in ("openvino", "iree") and (missing := get_adapter(backend, require_installed=False).missing()):
        pytest.skip(missing)
    table = _table(["ok", "mismatch"]).drop("by_design").with_columns(seed=pl.Series([1, 2]))
    out, meta = relabel_by_design(table, backend, "cpu")
    assert out["class"].to_list() == ["ok", "mismatch"] and out["by_design"].to_list() == ["", ""]
    assert out["faithful_rerun"][0] == "" and out["faithful_rerun"][1] == f"not rerun: {meta['faithful_casts']}"
    assert meta["faithful_casts"].startswith(why) and meta["faithful_reruns"] == 0


@pytest.mark.slow
def test_an_elided_float16_round_trip_is_relabelled_by_design_by_its_worker_rerun():
    """Two typed programs of the default profile's plan that mismatch on Inductor (2.13, CPU; the same with
    ATen's AVX-512, AVX2 and default capabilities, each checked with a cache of its own when the test was
    written, so it is not among the tests re-run per capability): 325748 casts to float16 between fused operations,
    which Inductor elides, and an output reads NaN where eager and fp64 read 1.0, clean with
    emulate_precision_casts; 325742 computes 2.0 where eager and fp64 compute 0.0 with or without it (a
    real defect). 325743 ran clean and is not rerun; a float32 program without a 16-bit value is not
    rerun either."""
    table = pl.DataFrame(
        {
            "id": ["typed-325742-float16", "typed-325743-float32", "typed-325748-float16", "typed-20-float32"],
            "generator": ["typed"] * 4,
            "seed": [325742, 325743, 325748, 20],
            "class": ["mismatch", "ok", "mismatch", "mismatch"],
            "features": ["a", "b", "c", "d"],
            "message": ["real", "clean", "elided", "no 16-bit"],
        }
    )
    seen: list[str] = []
    with difftest.WorkerPool() as pool:  # as in the step: the programs, then their reruns, in one interpreter
        found = difftest.fuzz([("typed", 325742), ("typed", 325748)], isolated=True, pool=pool)
        assert [o.klass for o in found] == ["mismatch", "mismatch"]
        pid = pool.started[0].proc.pid
        out, meta = relabel_by_design(table, "inductor", "cpu", pool=pool, log=seen.append)
        assert len(pool.started) == 1 and pool.started[0].proc.pid == pid
    assert out["class"].to_list() == ["mismatch", "ok", "by_design", "mismatch"]
    assert out["by_design"].to_list() == ["", "", REASON, ""]
    assert out["faithful_rerun"].to_list() == ["mismatch", "", "ok", NO_16_BIT]
    assert out["message"].to_list() == table["message"].to_list()
    assert (meta["faithful_casts"], meta["faithful_reruns"], meta["faithful_rerun_workers"]) == (
        "emulate_precision_casts",
        2,
        1,
    )
    assert meta["faithful_rerun_seconds"] > 0
    assert meta["by_design"].value == f"- `typed-325748-float16`: {REASON}"
    assert seen == [
        "typed-325742-float16 with emulate_precision_casts: mismatch",
        "typed-325748-float16 with emulate_precision_casts: ok",
        f"2 faithful-casts reruns in {meta['faithful_rerun_seconds']:.1f} s: 1 by design",
    ]
    verdict, reason, claim = judge_difftest(out)
    assert verdict == CONTRADICTED and (claim["mismatches"], claim["by_design"], claim["compared"]) == (2, 1, 3)
    assert reason == (
        "2 of 3 compared programs have a wrong fused result (1 more by design, counted apart); first "
        "typed-325742-float16: real"
    )
    assert "typed-325748" not in claim["wrong_results"].value
