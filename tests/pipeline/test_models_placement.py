"""Where M builds its models: each architecture's weights drawn on the run's device itself, not on the
host and moved, and each dtype's module cast there. The "meta" device stands in for an accelerator
(this torch has no CUDA): its tensors carry shape, dtype and device but no data, so every op a build
runs is recorded with the device of what it returns."""

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from pipeline.experiments.models import compute
from pipeline.experiments.models.zoo import ARCHITECTURES, zoo_workloads

#: Host bytes a build may create besides its weights: library code computes a few schedule scalars on
#: the host (ConvNeXt's drop-path rates: a linspace over its stages' depths, then split).
HOST_SCALARS_BYTES = 1024


class Created(TorchDispatchMode):
    """Bytes of every tensor an op returns, by device type."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.bytes[t.device.type] = self.bytes.get(t.device.type, 0) + t.numel() * t.element_size()
        return out


@contextlib.contextmanager
def no_rng_fork() -> Iterator[None]:
    """``fork_rng`` saves and restores an accelerator's generator, which the meta device has not."""
    yield


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_an_architecture_is_built_on_the_run_device_and_cast_there(name, monkeypatch):
    monkeypatch.setattr(torch.random, "fork_rng", lambda *a, **k: no_rng_fork())
    (workload,) = zoo_workloads((name,), "tiny", 16, 32)
    device = torch.device("meta")
    with Created() as created:
        master = compute.master_module(workload, device, lambda *parts: 7)
        working = compute.cast_module(master, "bfloat16")
    tensors = [*working.parameters(), *working.buffers()]
    assert {t.device for t in [*master.parameters(), *master.buffers(), *tensors]} == {device}
    assert {p.dtype for p in working.parameters()} == {torch.bfloat16}
    weights = sum(p.numel() * p.element_size() for p in master.parameters())
    assert created.bytes["meta"] >= weights  # the weights were drawn on the device
    assert created.bytes.get("cpu", 0) <= HOST_SCALARS_BYTES  # and never on the host


def test_the_recorder_sees_a_build_on_the_host(monkeypatch):
    """The same build with the device ignored (built on the host, then moved): the recorder sees it."""
    monkeypatch.setattr(torch.random, "fork_rng", lambda *a, **k: no_rng_fork())
    (workload,) = zoo_workloads(("gpt2",), "tiny", 16, 32)
    with Created() as created:
        moved = workload.build().to("meta")
    assert {p.device.type for p in moved.parameters()} == {"meta"}
    assert created.bytes["cpu"] >= sum(p.numel() * p.element_size() for p in moved.parameters())
