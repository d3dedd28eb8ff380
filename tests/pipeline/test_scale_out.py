"""Scale-out: the multiprocess executor on a persistent instance, and the deploy/ configuration files."""

import os
from pathlib import Path

import _scale_out_jobs  # tests/pipeline is on sys.path (pytest rootdir import mode)
import dagster as dg
import pytest
import torch
import yaml

from pipeline import storage
from pipeline.definitions import defs

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _reconstructable_job():
    # Step processes rebuild the job from the helper file by path (tests/ is not a package).
    from dagster._core.definitions.reconstruct import ReconstructableJob

    return ReconstructableJob.for_file(str(Path(_scale_out_jobs.__file__).resolve()), "s_assets_job")


def _run_config(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


# make test-all: steps in processes of their own are what make test-cluster runs in CI too, through Celery
# workers on the same slice (tests/cluster/test_celery.py); make test keeps the run config's validation below.
@pytest.mark.heavy
def test_s_assets_run_with_the_multiprocess_executor(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_DATA_DIR", str(tmp_path / "data"))
    run_config = _run_config("run_config.multiprocess.yaml")
    run_config.pop("resources")  # the test job binds its own smoke settings
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = dg.execute_job(_reconstructable_job(), instance=instance, run_config=run_config)
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run.run_config["execution"]["config"]["multiprocess"]["max_concurrent"] == 2
        # Steps ran in their own processes: the step-start events carry other pids than this one.
        pids = {e.pid for e in result.all_events if e.event_type_value == "STEP_START"}
        assert pids and os.getpid() not in pids
        checks = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert len(checks) == 2 and all(e.event_specific_data.passed for e in checks)
    name = _scale_out_jobs.WORKLOAD
    pool = storage.read_value(tmp_path / "data" / "smoke" / f"input_pool_{name}")
    refs = storage.read_value(tmp_path / "data" / "smoke" / f"fp64_reference_{name}")
    assert pool and refs and all(v.dtype == torch.float64 for v in refs.values())


def test_multiprocess_run_config_is_valid_for_all_assets_job():
    job = defs.resolve_job_def("all_assets_job")
    run_config = _run_config("run_config.multiprocess.yaml")
    resolved = dg.validate_run_config(job, run_config)["execution"]["multi_or_in_process_executor"]
    assert resolved["multiprocess"]["max_concurrent"] == 2
    with pytest.raises(dg.DagsterInvalidConfigError):  # the validation is real: a misspelt key fails
        dg.validate_run_config(job, {"execution": {"config": {"multiprocess": {"max_concurent": 2}}}})


def test_k8s_run_config_names_existing_gpu_steps():
    cfg = _run_config("run_config.k8s.yaml")["execution"]["config"]
    job = defs.resolve_job_def("all_assets_job")
    steps = {node.name for node in job.graph.node_defs}
    per_step = cfg["per_step_k8s_config"]
    unknown = sorted(set(per_step) - steps)
    assert not unknown, f"run_config.k8s.yaml names steps the code location does not have: {unknown}"
    for name, step in per_step.items():
        limits = step["container_config"]["resources"]["limits"]
        assert limits.get("nvidia.com/gpu") == "1", name
        assert step["pod_spec_config"]["node_selector"], name
    # Only heavy steps (pool compute_device) are sent to GPU nodes.
    pools = {node.name: getattr(node, "pool", None) for node in job.graph.node_defs}
    assert {pools[s] for s in per_step} == {"compute_device"}


def test_instance_yaml_uses_postgres_and_k8s_launcher():
    inst = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    pg = inst["storage"]["postgres"]["postgres_db"]
    assert all(isinstance(pg[k], dict) and "env" in pg[k] for k in ("hostname", "username", "password", "db_name"))
    assert inst["run_launcher"]["class"] == "K8sRunLauncher"
    assert inst["concurrency"]["pools"]["default_limit"] >= 1
