import pytest
import torch

from pipeline import devices
from pipeline.devices import DeviceError, check_device
from pipeline.resources import ExperimentSettings


def test_cpu_and_auto_resolve_here():
    assert check_device("cpu") == torch.device("cpu") and check_device(" cpu:0 ") == torch.device("cpu:0")
    expected = next((k for k in devices.ACCELERATORS if devices.is_available(k)), "cpu")
    assert check_device("auto") == torch.device(expected)


@pytest.mark.parametrize(
    "name, message",
    [
        ("tpu", "unknown device type 'tpu'"),
        ("gpu", "unknown device type 'gpu'"),
        ("cuda:x", "index in 'cuda:x' must be a non-negative integer"),
        ("cpu:1", "the cpu has no index other than 0"),
        ("", "non-empty string"),
    ],
)
def test_malformed_names_are_refused_with_the_problem_named(name, message):
    with pytest.raises(DeviceError, match=message):
        check_device(name)


@pytest.mark.parametrize("kind", devices.ACCELERATORS)
def test_a_backend_torch_does_not_report_is_refused_naming_what_is_available(kind):
    if devices.is_available(kind):
        pytest.skip(f"{kind} is present on this machine")
    with pytest.raises(DeviceError, match=f"torch reports no {kind} backend.*available: cpu"):
        check_device(f"{kind}:0")


def test_an_index_past_the_device_count_is_refused(monkeypatch):
    # A machine with two CUDA devices, as torch would report it.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(DeviceError, match="torch sees 2 cuda device"):
        check_device("cuda:2")


def test_settings_use_the_device_check_and_label_results():
    # the settings refuse a bad device when they are built, before any step uses it
    with pytest.raises(ValueError, match="unknown device type 'cdua'"):
        ExperimentSettings(profile="smoke", device="cdua")
    plain = ExperimentSettings(profile="smoke", device="cpu", device_label="")
    assert plain.device_key() == devices.device_name(torch.device("cpu"))
    prov = ExperimentSettings(profile="smoke", device="cpu", device_label="node-3").provenance()
    assert prov["device_label"] == "node-3" and prov["device"] == "cpu" and prov["cuda_runtime"] == ""
