"""The artifact hashing of task A: CPU shared objects for real, the Triton path with stand-in objects."""

import types

import pytest
import torch

from pipeline.artifacts import (
    artifact_of,
    capture_modules,
    combined_sha256,
    describe_byte_difference,
    elf_sections,
    kernel_artifacts,
    loaded_sha256,
)
from precisionkit import fused


def _ffn(x, w, b):
    return torch.nn.functional.gelu(x @ w + b)


def test_cpu_kernel_artifact_is_the_loaded_shared_object():
    x, w, b = torch.randn(4, 8), torch.randn(8, 32), torch.randn(32)
    fn = fused(_ffn)
    with capture_modules() as modules:
        fn(x, w, b)
    (art,) = kernel_artifacts(modules, fn.evidence.kernel_names)
    assert art.kind == "cpu_shared_object" and art.size == len(art.data) > 0
    assert art.sha256 == loaded_sha256(art.data) and art.file_sha256 != art.sha256
    names = [n for n, _, _ in elf_sections(art.data)]
    assert ".text" in names
    if not any(n.startswith(".debug") for n in names):
        pytest.skip(
            f"torch {torch.__version__} builds CPU kernels without debug sections: nothing to patch outside them"
        )
    # Changing bytes outside the loaded sections (debug info) keeps the artifact hash, not the file hash.
    debug = next((off, size) for n, off, size in elf_sections(art.data) if n == ".debug_str" and size)
    patched = bytearray(art.data)
    patched[debug[0]] ^= 0xFF
    assert loaded_sha256(bytes(patched)) == art.sha256
    text = describe_byte_difference(art.data, bytes(patched))
    assert (
        "1 differing bytes" in text and ".debug_str 1" in text and "allocated (loaded) sections are identical" in text
    )
    assert combined_sha256([art]) == combined_sha256([art.record()])


def test_triton_kernel_artifact_records_binary_and_autotuning_choice():
    config = types.SimpleNamespace(kwargs={"XBLOCK": 64, "R0_BLOCK": 512}, num_warps=8, num_stages=1)
    launcher = types.SimpleNamespace(
        config=config, bin=types.SimpleNamespace(asm={"cubin": b"\x7fELFcubin", "ptx": ".visible .entry k"})
    )
    autotuner = types.SimpleNamespace(launchers=[launcher], compile_results=[], configs=[config, config])
    art = artifact_of("triton_red_fused_sum_0", autotuner)
    assert art.kind == "triton_cubin" and art.data == b"\x7fELFcubin"
    assert art.autotune_choice == "R0_BLOCK=512, XBLOCK=64, num_warps=8, num_stages=1"
    assert "1 launcher(s) of 2 config(s)" in art.detail
    # Another autotuning choice with the same binary is another artifact hash (the choice is part of it).
    other = artifact_of(
        "triton_red_fused_sum_0",
        types.SimpleNamespace(
            launchers=[
                types.SimpleNamespace(
                    config=types.SimpleNamespace(kwargs={"XBLOCK": 1}, num_warps=4, num_stages=1), bin=launcher.bin
                )
            ],
            compile_results=[],
            configs=[],
        ),
    )
    assert other.sha256 == art.sha256 and combined_sha256([other]) != combined_sha256([art])


def test_unknown_or_missing_kernels_are_kept_in_the_record():
    assert artifact_of("k", object()).kind == "unknown"
    (missing,) = kernel_artifacts([], ["cpp_fused_x_0"])
    assert missing.kind == "not_found" and missing.size == 0
    assert describe_byte_difference(b"abc", b"abc") == "identical bytes"
    assert "1 differing bytes in the common 3, first at offset 0x1" in describe_byte_difference(b"abc", b"axc")
