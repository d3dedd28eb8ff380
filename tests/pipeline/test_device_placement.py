"""Where S's pools are drawn and its fp64 references computed: on the run's device, with the CPU's bits
unchanged.

This torch build has no CUDA, so the device tests run under ``FakeTensorMode``, where tensors of
device ``cuda`` carry shape, dtype and device but no data: every op the samplers and the reference
run is checked for the device of what it returns. A CUDA generator cannot be created without the
CUDA library, so the one place the draw's generator is made (``workloads.seeded_generator``) is
replaced by a CPU generator that reports ``cuda`` as its device: the samplers read the device from
the generator, as they do with a real CUDA one. Two things fake CUDA tensors cannot do on this build:
Python indexing (``t[i]``, ``t[:, None]``) and ``Tensor.to`` from the host ask for the CUDA library;
where the code under test needs them, the "meta" device stands in for the run's device.
"""

import hashlib
from collections.abc import Mapping

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from pipeline import workloads
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.experiments.toolkit.spec import SIZES
from pipeline.resources import ExperimentSettings
from pipeline.workloads import CHAINS, WORKLOADS
from precisionkit import fp64_reference

SMOKE = SIZES["smoke"]
SEED, SETS = 2026, 3


def digest(tensors: Mapping[str, torch.Tensor], as_dtype: torch.dtype | None = None) -> str:
    """The first 16 hex digits of a SHA-256 over every tensor's name, dtype, shape and bytes; with
    ``as_dtype``, over the values rounded to that dtype (round to nearest even)."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        t = tensors[k].detach()
        t = (t if as_dtype is None else t.to(as_dtype)).contiguous()
        h.update(f"{k}:{t.dtype}:{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


# Which digests may depend on the CPU, and how each is made independent of it.
#
# - Exact by construction: a draw made only of the generator's uniform and normal streams and of
#   exactly rounded arithmetic (+, *, scalars that are powers of two) has the same bits on every
#   x86-64 CPU: torch's CPU generators produce the same stream whatever the vector ISA, and an
#   exactly rounded operation has one result. These are hashed bit for bit.
# - ISA-rounded: a value that passes through an fp64 transcendental or a BLAS product depends on
#   ATen's CPU capability (Sleef's vectorized pow/exp under AVX2 and AVX-512, a scalar loop under
#   the default capability; different loop orders in the products). Those kernels are within a few
#   fp64 ULPs of each other, so the value is hashed after rounding to fp32, which leaves 29 bits of
#   margin over those differences. Each digest of this kind was checked equal under
#   ATEN_CPU_CAPABILITY=default, avx2 and avx512 at 1 and 2 threads (on an AVX-512 CPU, torch 2.13);
#   `make test` re-runs this module under each capability the CPU has (tests marked isa_sensitive).
#   The fp64 references are all of this kind; among the draws, only wide_range (10**U) is.
ISA_ROUNDED = torch.float32
#: Distributions whose draw passes through an fp64 transcendental (hashed ISA-rounded).
TRANSCENDENTAL_DISTRIBUTIONS = frozenset({"wide_range"})


# The exact hashes below were computed from the code before the draw moved to the run's device
# (commit 72ae4bf): Workload.sample from `git show 72ae4bf:pipeline/workloads.py` loaded as a module
# of its own, with the :func:`digest` above on `sample(SMOKE, distribution, 3, 2026, dtype)`; the
# pools and references with that commit's toolkit/assets.py, settings `ExperimentSettings(profile="smoke")`.
# The ISA-rounded ones were computed from the same bits (the current code reproduces 72ae4bf's exact
# digests under AVX2 and AVX-512), rounded as :data:`ISA_ROUNDED` says.

#: (workload, distribution, dtype) -> digest of the CPU draw (dtype only where the spread is in its units).
SAMPLE_DIGESTS = {
    ("ffn", "normal", None): "a07e9c39a444f7e9",
    ("mul_add_gelu_mul", "normal", None): "96933ddb0eee7ce3",
    ("mul_add_gelu_mul", "wide_range", None): "d65c6749f3ed2831",
    ("mul_add_gelu_mul", "subnormal_range", None): "7f09b47c40413cbe",
    ("layernorm", "normal", None): "8187dd1be82b24a7",
    ("layernorm", "near_cancellation", "float16"): "7977b33cd7d32721",
    ("layernorm", "near_cancellation", "bfloat16"): "f6e6406128714fed",
    ("layernorm", "near_cancellation", "float32"): "20a2a23f826c2431",
    ("softmax", "normal", None): "f4e5023c3099f97c",
    ("softmax", "large_logits", None): "977352a84c85e7e0",
    ("softmax", "large_offset", None): "b625aa03dca84de1",
    ("matmul_add_layernorm", "normal", None): "ffa71c23b0b3841f",
    ("matmul_add_layernorm", "wide_range", None): "ab07502d001cc499",
    ("attention", "normal", None): "7a0fcaccd5ef2bd6",
    ("attention", "peaked", None): "4d6ff7d9b6929ab8",
    ("attention_masked", "normal", None): "8fb75fed3e7f62ab",
    ("attention_masked", "peaked", None): "f3aeeac1df0a1e68",
    ("attention_masked", "fully_masked", None): "4c1f74e53afc2cae",
    ("layernorm_long", "normal", None): "0f30a39bf4e71d1e",
    ("layernorm_long", "near_cancellation", "float16"): "0336859d90c74039",
    ("layernorm_long", "near_cancellation", "bfloat16"): "f1d761f0757cc85a",
    ("layernorm_long", "near_cancellation", "float32"): "d110d96dbb804556",
    ("rmsnorm_long", "normal", None): "5609920c8371a357",
}

#: Sets per pool when the digests were recorded (the smoke profile's size then).
RECORDED_SETS = 6
#: workload -> digest of its first RECORDED_SETS smoke sets (`pool_stream(...).produce(0, 6)`), every entry as stored.
POOL_DIGESTS = {
    "ffn": "79c85e099c3bef75",
    "mul_add_gelu_mul": "346dae4f2460e29b",
    "layernorm": "4811dc526674e86e",
    "softmax": "b5cb7df41a9200b0",
    "matmul_add_layernorm": "3e04997958d113f5",
    "attention": "693fa310146445d4",
    "attention_masked": "1a999132cb0d86b5",
    "layernorm_long": "1fddda01bf4aacf9",
    "rmsnorm_long": "e6f87c7f7b8e5877",
}

#: chain -> ISA-rounded digest of the fp64 references of that pool (`reference_stream(...).produce(0, n_sets)`).
REFERENCE_DIGESTS = {
    "mul_add_gelu_mul": "3ef34fb9f20aaebc",
    "layernorm": "6f49623f9f5f1dd1",
    "softmax": "7a9f9578166b1c8a",
    "matmul_add_layernorm": "57f2c0fa1e5432ac",
    "attention": "a5e9782469dc72e5",
    "attention_masked": "bb701d3bf93859d2",
    "layernorm_long": "8841c3ac2f6fe388",
    "rmsnorm_long": "18c6e5ee1b0f2be8",
}

#: Every workload x distribution, with the dtypes a distribution in dtype units is drawn for.
CASES = [
    (name, d, t)
    for name, wl in WORKLOADS.items()
    for d in wl.distributions
    for t in (("float16", "bfloat16", "float32") if wl.in_dtype_units(d) else (None,))
]


def test_the_recorded_digests_cover_every_workload_and_distribution():
    assert set(SAMPLE_DIGESTS) == set(CASES)
    assert set(POOL_DIGESTS) == set(WORKLOADS) and set(REFERENCE_DIGESTS) == set(CHAINS)


@pytest.mark.parametrize(("name", "distribution", "dtype"), CASES)
@pytest.mark.isa_sensitive
def test_a_cpu_draw_has_the_bits_it_had_before(name, distribution, dtype):
    wl = WORKLOADS[name]
    as_dtype = ISA_ROUNDED if distribution in TRANSCENDENTAL_DISTRIBUTIONS else None
    expected = SAMPLE_DIGESTS[(name, distribution, dtype)]
    assert digest(wl.sample(SMOKE, distribution, SETS, SEED, dtype), as_dtype) == expected
    on_cpu = wl.sample(SMOKE, distribution, SETS, SEED, dtype, device=torch.device("cpu"))
    assert digest(on_cpu, as_dtype) == expected


@pytest.mark.isa_sensitive
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cpu_pools_and_references_have_the_bits_they_had_before(name):
    settings = ExperimentSettings(profile="smoke", device="cpu")
    wl = WORKLOADS[name]
    stream = toolkit.pool_stream(wl, settings)
    # Each set has its own seed, so the first sets keep their bits whatever the pool's size.
    pool = stream.produce(0, min(RECORDED_SETS, stream.n_sets))
    assert digest(pool) == POOL_DIGESTS[name]
    if name in CHAINS:
        refs = toolkit.reference_stream(wl, pool, settings.torch_device())
        assert digest(refs.produce(0, refs.n_sets), ISA_ROUNDED) == REFERENCE_DIGESTS[name]


class _ReportsCuda(torch.Generator):
    """A CPU generator that says it is CUDA's: the fake run device's stand-in (see the module's text)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda")


class _Devices(TorchDispatchMode):
    """Records the device of every tensor each op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen |= {(str(func), t.device.type) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        return out


def _off_device(seen: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(op, device) for op, device in seen if device != "cuda"}


@pytest.fixture
def cuda_generator(monkeypatch):
    """``seeded_generator`` on the fake CUDA device; records the devices it was asked for."""
    asked: list[str] = []

    def seeded(device, seed):
        asked.append(str(device))
        return _ReportsCuda().manual_seed(seed)

    monkeypatch.setattr(workloads, "seeded_generator", seeded)
    return asked


@pytest.mark.parametrize(("name", "distribution", "dtype"), CASES)
def test_every_distribution_draws_on_the_run_device(cuda_generator, name, distribution, dtype):
    wl = WORKLOADS[name]
    with FakeTensorMode(), _Devices() as ops:
        drawn = wl.sample(SMOKE, distribution, 2, SEED, dtype, device="cuda")
    assert cuda_generator == ["cuda"]
    assert list(drawn) == list(wl.arg_names)
    shapes = wl.shapes(SMOKE)
    for arg, value in drawn.items():
        assert (value.device.type, value.dtype, tuple(value.shape)) == ("cuda", torch.float64, (2, *shapes[arg]))
    assert ops.seen and not _off_device(ops.seen)  # no op of the draw ran on the host


@pytest.mark.parametrize("name", CHAINS)
def test_the_fp64_reference_of_device_inputs_stays_on_the_device(name):
    wl = WORKLOADS[name]
    with FakeTensorMode(allow_non_fake_inputs=True):
        shapes = wl.shapes(SMOKE)
        args = tuple(torch.empty(shapes[a], dtype=torch.float16, device="cuda") for a in wl.arg_names)
        with _Devices() as ops:
            out = fp64_reference(wl.fn, args)
        assert (out.device.type, out.dtype) == ("cuda", torch.float64)
        assert not _off_device(ops.seen)  # no host copy of an input, no step on the host
        # The copy semantics hold on the device: an fp64 input is copied, not handed to the graph.
        x64 = torch.empty(4, dtype=torch.float64, device="cuda")
        assert fp64_reference(lambda v: v, x64) is not x64


def test_the_pool_stream_draws_on_the_run_device(cuda_generator, monkeypatch):
    monkeypatch.setattr(ExperimentSettings, "torch_device", lambda self: torch.device("cuda"))
    settings = ExperimentSettings(profile="smoke", device="cpu")
    wl = WORKLOADS["layernorm"]  # a distribution in dtype units: drawn once per dtype
    with FakeTensorMode(), _Devices() as ops:
        stream = toolkit.pool_stream(wl, settings)
        pool = stream.produce(0, 2)
    assert set(cuda_generator) == {"cuda"} and len(cuda_generator) == 2 * (1 + 2)  # sets x (normal + 2 dtypes)
    assert {v.device.type for v in pool.values()} == {"cuda"}
    assert {k: v.dtype for k, v in pool.items()} == {k: dtype for k, (_, dtype) in stream.entries.items()}
    assert ops.seen and not _off_device(ops.seen)  # drawn and rounded to each dtype on the device


def test_a_stored_pool_on_the_host_is_referenced_on_the_device():
    """The reference reads the stored pool (host tensors) and computes on the run's device. A fake
    tensor cannot be moved from the host to CUDA on a build without CUDA (``Tensor.to`` asks for the
    CUDA library), so the "meta" device stands in for the run's device here."""
    wl = WORKLOADS["attention_masked"]
    stream = toolkit.pool_stream(wl, ExperimentSettings(profile="smoke", device="cpu"))
    pool = stream.produce(0, stream.n_sets)  # CPU tensors, as read back from storage
    refs = toolkit.reference_stream(wl, pool, "meta").produce(0, stream.n_sets)
    heads, seq, dim = SMOKE.attention
    out_shape = (stream.n_sets, 1, heads, seq, dim)  # [batch, seq, heads, dim] inputs, heads-first output
    assert {k: (v.device.type, v.dtype, tuple(v.shape)) for k, v in refs.items()} == {
        f"{d}/{t}": ("meta", torch.float64, out_shape) for d in wl.distributions for t in ("float16", "bfloat16")
    }


def test_d_draws_each_input_key_on_the_run_device(cuda_generator, monkeypatch):
    """D draws its x and y once per (dtype, shape, layout, salted) key, on the run's device, from that
    device's generator (a counterexample's key: unsalted, y in fp64)."""
    from pipeline.experiments.data_movement import assets as d_assets
    from pipeline.experiments.data_movement import movement

    monkeypatch.setattr(movement, "seeded_generator", workloads.seeded_generator)  # the fake CUDA one
    key = d_assets.input_key("scaled_add_concat", "float16", (2, 8, 16), "contiguous")
    with FakeTensorMode(), _Devices() as ops:
        x, y = d_assets.draw_inputs(key, (11, 12), torch.device("cuda"))
    assert cuda_generator == ["cuda", "cuda"] and not key[3]
    assert (x.device.type, x.dtype, tuple(x.shape)) == ("cuda", torch.float16, (2, 8, 16))
    assert (y.device.type, y.dtype) == ("cuda", torch.float64)
    assert ops.seen and not _off_device(ops.seen)  # drawn and rounded on the device


class _ReportsMeta(torch.Generator):
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("meta")


def test_d_salts_a_pure_graphs_inputs_on_the_run_device(monkeypatch):
    """A pure movement graph's key is salted with specials in place (index writes: "meta" stands in for
    the run's device, see the module's text), in a transposed layout, all of it where the draw is."""
    from pipeline.experiments.data_movement import assets as d_assets
    from pipeline.experiments.data_movement import movement

    monkeypatch.setattr(movement, "seeded_generator", lambda device, seed: _ReportsMeta().manual_seed(seed))
    key = d_assets.input_key("transpose_concat", "float16", (2, 8, 16), "transposed_view")
    with _Devices() as ops:
        x, y = d_assets.draw_inputs(key, (11, 12), torch.device("meta"))
    assert key[3] and {(t.device.type, t.dtype, tuple(t.shape)) for t in (x, y)} == {
        ("meta", torch.float16, (2, 8, 16))
    }
    assert x.stride() == (128, 1, 8)  # a transpose of a contiguous [batch, hidden, seq] buffer
    assert {d for _, d in ops.seen} == {"meta"} and any("randint" in op for op, _ in ops.seen)


def test_c2_long_rows_are_summed_in_fp64_where_they_are():
    """C2's fp64 sums of its long rows run on the rows' device ("meta" stands in for a GPU, see the
    module's text): only the two sums per row go to the host, where the caller reads them."""
    from pipeline.experiments.reduction_order.long import fp64_sums

    x = torch.empty(3, 5000, dtype=torch.float32, device="meta")
    with _Devices() as ops:
        total, abs_total = fp64_sums(x)
    assert {(t.device.type, t.dtype, tuple(t.shape)) for t in (total, abs_total)} == {("meta", torch.float64, (3,))}
    assert {d for _, d in ops.seen} == {"meta"}
    rows = torch.tensor([[1.0, -2.0, 0.5], [3.0, 3.0, -7.0]])
    assert [t.tolist() for t in fp64_sums(rows)] == [[-0.5, -1.0], [3.5, 13.0]]  # the CPU's values as before
