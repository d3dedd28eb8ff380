"""The artifact hashing of task A: CPU shared objects for real, the Triton path with stand-in objects."""

import struct
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


def _elf(sections: list[tuple[str, int, bytes]]) -> bytes:
    """A minimal 64-bit little-endian ELF file holding ``(name, flags, data)`` sections."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, offsets, off = b"", [], 64
    for _, _, data in sections:
        offsets.append(off + len(body))
        body += data
    str_off = 64 + len(body)
    shoff = str_off + len(names)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(sections) + 2, len(sections) + 1)
    table, name_at = bytes(64), 1  # the null section first
    for (name, flags, data), at in zip(sections, offsets, strict=True):
        table += struct.pack("<IIQQQQ", name_at, 1, flags, 0, at, len(data)) + bytes(24)
        name_at += len(name) + 1
    table += struct.pack("<IIQQQQ", name_at, 3, 0, 0, str_off, len(names)) + bytes(24)
    return bytes(header) + body + names + table


def _autotuner(cubin: bytes, xblock: int = 64) -> types.SimpleNamespace:
    config = types.SimpleNamespace(kwargs={"XBLOCK": xblock}, num_warps=4, num_stages=1)
    launcher = types.SimpleNamespace(config=config, bin=types.SimpleNamespace(asm={"cubin": cubin, "ptx": ""}))
    return types.SimpleNamespace(launchers=[launcher], compile_results=[], configs=[config])


def test_cubin_hash_covers_the_loaded_sections_not_the_cache_path_in_debug_info():
    # As on the H200 (2026-11-27): a cold recompile in another cache folder changed only the cubin's
    # debug sections (the PTX text and line tables name the kernel's cache file).
    code = b"\x01\x02\x03\x04" * 8
    round1 = _elf([(".text.triton_k", 0x6, code), (".nv_debug_ptx_txt", 0, b"// /tmp/cache-a/ab/cab.py\0")])
    cold = _elf([(".text.triton_k", 0x6, code), (".nv_debug_ptx_txt", 0, b"// /tmp/cold-b/cd/ccd123.py\0")])
    a, b = artifact_of("triton_k", _autotuner(round1)), artifact_of("triton_k", _autotuner(cold))
    assert a.kind == b.kind == "triton_cubin"
    assert a.sha256 == b.sha256 == loaded_sha256(round1) and a.file_sha256 != b.file_sha256
    assert "allocated (loaded) sections are identical" in describe_byte_difference(round1, cold)
    # Other machine code is another artifact.
    moved = _elf([(".text.triton_k", 0x6, code[::-1]), (".nv_debug_ptx_txt", 0, b"// /tmp/cache-a/ab/cab.py\0")])
    assert artifact_of("triton_k", _autotuner(moved)).sha256 != a.sha256


def test_the_module_whose_kernel_ran_gives_the_artifact():
    # Two loaded wrapper modules define a kernel of the same name; only one has run (has a launcher).
    idle = types.ModuleType("idle")
    idle.triton_k = types.SimpleNamespace(launchers=[], compile_results=[], configs=[])
    ran = types.ModuleType("ran")
    ran.triton_k = _autotuner(b"\x7fELFcubin")
    (art,) = kernel_artifacts([idle, ran], ["triton_k"])
    assert art.kind == "triton_cubin" and art.data == b"\x7fELFcubin"
    (only_idle,) = kernel_artifacts([idle], ["triton_k"])
    assert only_idle.kind == "triton_unavailable"
