"""The instance the CLI opens keeps Dagster's telemetry off whatever ``$DAGSTER_HOME`` holds."""

from pipeline.cli import local


def _telemetry(home, monkeypatch) -> bool:
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = local.local_instance()
    try:
        return instance.telemetry_enabled
    finally:
        instance.dispose()


def test_an_empty_dagster_home_gets_the_project_settings(tmp_path, monkeypatch):
    # As on the GPU node of 2026-11-27: an empty dagster.yaml, so Dagster printed its telemetry notice.
    (tmp_path / "dagster.yaml").write_text("")
    assert _telemetry(tmp_path, monkeypatch) is False
    assert (tmp_path / "dagster.yaml").read_text() == local.PROJECT_INSTANCE_YAML.read_text()
    fresh = tmp_path / "fresh"
    assert _telemetry(fresh, monkeypatch) is False and (fresh / "dagster.yaml").is_file()


def test_own_settings_are_kept_and_telemetry_is_added_only_where_unsaid(tmp_path, monkeypatch):
    own = "run_queue:\n  max_concurrent_runs: 3\n"
    (tmp_path / "dagster.yaml").write_text(own)
    assert _telemetry(tmp_path, monkeypatch) is False
    text = (tmp_path / "dagster.yaml").read_text()
    assert text.startswith(own) and text.endswith("telemetry:\n  enabled: false\n")
    said = tmp_path / "said"
    said.mkdir()
    (said / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    assert _telemetry(said, monkeypatch) is True  # someone's explicit choice is theirs
    assert (said / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
