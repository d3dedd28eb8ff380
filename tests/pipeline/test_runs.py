"""pipeline.runs: the one query for "records of this profile and device"."""

from __future__ import annotations

import dagster as dg
import pytest

from pipeline import runs

LOCAL_SMOKE = {"provenance.profile": "smoke", "provenance.device_label": "cpu-a"}
LOCAL_SEED = {"provenance.profile": "seed", "provenance.device_label": "cpu-a"}
IMPORTED_SMOKE = {"provenance.profile": "smoke", "provenance.device_label": "H200", runs.IMPORTED_FROM: "/b"}
OLD_NAME = {"provenance.profile": "smoke", "provenance.device_name": "cpu-b"}  # no device label


def test_matches_by_profile_device_and_origin():
    assert runs.matches(LOCAL_SMOKE, "smoke", "cpu-a", "local")
    assert not runs.matches(LOCAL_SMOKE, "seed")
    assert not runs.matches(LOCAL_SMOKE, "smoke", "H200")
    assert not runs.matches(LOCAL_SMOKE, origin="imported")
    assert runs.matches(IMPORTED_SMOKE, "smoke", "H200", "imported")
    assert not runs.matches(IMPORTED_SMOKE, "smoke", origin="local")
    assert runs.matches(IMPORTED_SMOKE) and runs.matches({}, origin="local")  # None takes everything
    assert runs.matches(OLD_NAME, "smoke", "cpu-b")
    assert runs.profile_of(LOCAL_SEED) == "seed" and runs.profile_of({}) is None
    with pytest.raises(ValueError, match="origin must be"):
        runs.matches(LOCAL_SMOKE, origin="remote")  # type: ignore[arg-type]


def test_records_filters_the_newest_materializations_newest_first():
    key = dg.AssetKey("a")
    with dg.DagsterInstance.ephemeral() as instance:
        for i, meta in enumerate((LOCAL_SMOKE, LOCAL_SEED, IMPORTED_SMOKE, LOCAL_SMOKE)):
            instance.report_runless_asset_event(dg.AssetMaterialization(key, metadata={**meta, "i": i}))
        assert [m["i"] for *_, m in runs.records(instance, key, "smoke")] == [3, 2, 0]
        assert [m["i"] for *_, m in runs.records(instance, key, "smoke", origin="local")] == [3, 0]
        assert [m["i"] for *_, m in runs.records(instance, key, device="H200")] == [2]
        # the limit counts the materializations read, before the filter
        assert [m["i"] for *_, m in runs.records(instance, key, "smoke", origin="local", limit=2)] == [3]
