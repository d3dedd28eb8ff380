"""M on a compiler that cannot compile every model: a model x dtype it failed on is its finding and is not
judged; the run is invalid only when none compiled, as D's rows (the default OpenVINO report's llama and
convnext, whose compile fails in Dynamo's guards, made the whole of M invalid)."""

import dagster as dg
import polars as pl

from pipeline.experiments.models import checks
from pipeline.experiments.models.spec import SIZES
from pipeline.resources import ExperimentSettings

BATCHES = SIZES["smoke"].batches
FAILED = "OpenVINO: compile or fused run failed: IndexError: list index out of range"


def _table(errors: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model": [f"m{i}" for i in range(len(errors))],
            "dtype": ["float32"] * len(errors),
            "error": errors,
            "batches": [0 if e else BATCHES for e in errors],
            "eager_nonfinite": [0] * len(errors),
        }
    )


def _validity(table: pl.DataFrame) -> dg.AssetCheckResult:
    ctx = dg.build_asset_check_context(resources={"settings": ExperimentSettings(profile="smoke", device="cpu")})
    return checks.model_runs_valid(ctx, table)


def test_a_model_the_compiler_failed_on_is_a_finding_and_the_run_stays_valid():
    table = _table(["", FAILED])
    valid = _validity(table)
    assert valid.passed and valid.metadata["not_compiled"].value == 1
    found = checks.models_not_compiled(table)
    assert found.metadata["findings"].value == 1
    assert found.metadata["details"].value == f"m1 float32: {FAILED}"


def test_a_run_in_which_nothing_compiled_is_invalid_with_the_compilers_reason():
    valid = _validity(_table([FAILED, FAILED]))
    assert not valid.passed
    assert valid.metadata["problems"].value == f"no model x dtype compiled: m0 float32: {FAILED}"


def test_a_short_run_of_a_model_that_compiled_is_still_invalid():
    table = _table([""]).with_columns(pl.lit(BATCHES - 1).alias("batches"))
    valid = _validity(table)
    assert not valid.passed and f"{BATCHES - 1} of {BATCHES} batches" in valid.metadata["problems"].value
