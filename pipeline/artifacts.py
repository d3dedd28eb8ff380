"""What runs, hashed: the compiled artifact of every kernel Inductor generated for a fused call.

The normalized *source* hash (:attr:`precisionkit.FusionEvidence.code_sha256`) says whether the
generated program text is the same; the artifacts say whether the machine code that runs is:

* CPU: the shared object (``.so``) Inductor compiled from each ``cpp_fused_*`` kernel and loaded.
  Its hash covers what the loader maps: the bytes of every allocated ELF section (code, read-only
  data, relocations, symbol tables the loader uses), except the GNU build-id note, which is a
  digest of the whole file. The debug sections and the static symbol table are not loaded, and
  they hold the build folder's path, so a recompile in another cache folder changes the file but
  not the code; the whole-file hash is kept beside it (``file_sha256``);
* CUDA (Triton): the cubin (hsaco on ROCm) and the PTX of the launcher the run uses, and the
  autotuning choice (the ``triton.Config`` that won: block sizes, warps, stages). A cubin is ELF
  too, and its debug sections hold the kernel's cache path, so its hash covers the loaded sections
  as well (on the H200 run of 2026-11-27 a cold recompile changed only unloaded sections).

:func:`capture_modules` records the wrapper modules Inductor loads while a compile happens (through the
compiler's adapter, which knows where its compiled code lives: a compiler that exposes none has no artifacts);
:func:`kernel_artifacts` reads each kernel of those modules after the first call (so autotuning
has picked its launcher). :func:`describe_byte_difference` measures where two artifacts differ
(byte count, first offset, and the ELF sections that hold the differing bytes).
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class KernelArtifact:
    """One generated kernel's compiled form: ``kind`` (cpu_shared_object, triton_cubin, ...),
    sha256 and size of the bytes that run, the autotuning choice (Triton), and the bytes."""

    kernel: str
    kind: str
    sha256: str
    size: int
    autotune_choice: str
    detail: str
    data: bytes
    file_sha256: str = ""

    def record(self) -> dict[str, Any]:
        """JSON-friendly view (no bytes)."""
        return {
            "kernel": self.kernel,
            "kind": self.kind,
            "sha256": self.sha256,
            "file_sha256": self.file_sha256 or self.sha256,
            "size": self.size,
            "autotune_choice": self.autotune_choice,
            "detail": self.detail,
        }


@contextlib.contextmanager
def capture_modules(backend: str = "inductor") -> Iterator[list[ModuleType]]:
    """Collect the modules holding the compiled kernels that ``backend``'s compiler loads inside the ``with``
    block, as its adapter exposes them (:meth:`~precisionkit.backends.base.BackendAdapter.compiled_modules`:
    Inductor's wrapper modules); none for a compiler that exposes no binaries."""
    from precisionkit.backends import adapter_for_backend

    with adapter_for_backend(backend).compiled_modules() as modules:
        yield modules if modules is not None else []


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _config_text(config: Any) -> str:
    """A Triton config as text: its block sizes, warps and stages."""
    if config is None:
        return ""
    kwargs = getattr(config, "kwargs", {}) or {}
    parts = [f"{k}={v}" for k, v in sorted(kwargs.items())]
    for attr in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(config, attr, None)
        if value is not None:
            parts.append(f"{attr}={value}")
    return ", ".join(parts) or repr(config)


def _triton_binary(launcher: Any, result: Any) -> tuple[str, bytes, str]:
    """(format, binary, ptx/llir text) of a Triton launcher or compile result, whichever has it."""
    for holder in (getattr(launcher, "bin", None), getattr(result, "kernel", None)):
        asm = getattr(holder, "asm", None)
        if isinstance(asm, dict):
            for fmt in ("cubin", "hsaco", "spv"):
                if asm.get(fmt):
                    binary = asm[fmt]
                    text = asm.get("ptx") or asm.get("amdgcn") or asm.get("llir") or ""
                    return fmt, binary if isinstance(binary, bytes) else str(binary).encode(), str(text)
        for attr in ("cubin_raw", "cubin"):  # statically launched kernels keep the cubin themselves
            raw = getattr(holder, attr, None)
            if isinstance(raw, bytes) and raw:
                return "cubin", raw, ""
        path = getattr(holder, "cubin_path", None)
        if path and Path(path).is_file():
            return "cubin", Path(path).read_bytes(), ""
    return "", b"", ""


def artifact_of(name: str, obj: Any) -> KernelArtifact:
    """The compiled artifact of one kernel object from a wrapper module's globals."""
    owner = getattr(obj, "__self__", None)  # a C++ kernel: a function of the loaded extension module
    so_path = getattr(owner, "__file__", None)
    if isinstance(so_path, str) and so_path.endswith(".so") and Path(so_path).is_file():
        data = Path(so_path).read_bytes()
        loaded = loaded_sha256(data)
        return KernelArtifact(
            name,
            "cpu_shared_object",
            loaded or _sha(data),
            len(data),
            "",
            Path(so_path).name + ("" if loaded else " (not ELF: whole file hashed)"),
            data,
            _sha(data),
        )
    launchers = getattr(obj, "launchers", None)
    if launchers is not None:  # a Triton CachingAutotuner: after the first call, the launcher(s) it uses
        results = list(getattr(obj, "compile_results", []) or [])
        chosen = list(launchers) or results
        blobs, choices, texts = [], [], []
        for i, item in enumerate(chosen):
            result = results[i] if i < len(results) else None
            fmt, binary, text = _triton_binary(item, result)
            blobs.append(binary)
            texts.append(text)
            choices.append(_config_text(getattr(item, "config", None) or getattr(result, "config", None)))
        data = b"".join(blobs)
        ptx_sha = _sha("".join(texts).encode()) if any(texts) else "none"
        kind = f"triton_{fmt}" if data else "triton_unavailable"
        detail = f"{len(chosen)} launcher(s) of {len(getattr(obj, 'configs', []) or [])} config(s); ptx sha256 {ptx_sha[:16]}"
        # A cubin is an ELF file whose debug sections (the PTX text, line tables) name the cache file
        # the kernel was compiled from, so a recompile in another folder changes the file but not the
        # code: as for a shared object, the hash covers what the loader maps (one launcher's cubin).
        loaded = loaded_sha256(data) if len(blobs) == 1 else ""
        return KernelArtifact(
            name, kind, loaded or _sha(data), len(data), " | ".join(choices), detail, data, _sha(data)
        )
    return KernelArtifact(
        name, "unknown", _sha(b""), 0, "", f"no compiled artifact found on a {type(obj).__name__}", b""
    )


def kernel_artifacts(modules: list[ModuleType], kernel_names: tuple[str, ...] | list[str]) -> list[KernelArtifact]:
    """Every named kernel's artifact, read from the first captured module that defines it and holds
    its binary (else the first that defines it); a kernel found nowhere is kept with kind
    ``not_found`` (so the record stays complete)."""
    out = []
    for name in kernel_names:
        found = [artifact_of(name, getattr(m, name)) for m in modules if hasattr(m, name)]
        if not found:
            out.append(KernelArtifact(name, "not_found", _sha(b""), 0, "", "no loaded wrapper module defines it", b""))
        else:
            # Several loaded modules can define a kernel of that name (one graph per dtype, each with
            # its ``..._0``); the one whose kernel ran holds the binary, the others none yet.
            out.append(next((a for a in found if a.kind not in UNREADABLE_KINDS), found[0]))
    return out


#: Artifact kinds whose bytes could not be read: comparing them says nothing about the code that ran.
UNREADABLE_KINDS = ("triton_unavailable", "not_found", "unknown")


def readable(artifacts: list[dict[str, Any]]) -> bool:
    """Whether every kernel's compiled artifact of a round was read (records, as stored)."""
    return bool(artifacts) and all(a["kind"] not in UNREADABLE_KINDS for a in artifacts)


def combined_sha256(artifacts: list[KernelArtifact] | list[dict[str, Any]]) -> str:
    """One hash over every kernel's artifact hash and autotuning choice, in kernel order."""
    rows = [a.record() if isinstance(a, KernelArtifact) else a for a in artifacts]
    text = "\n".join(f"{r['kernel']}:{r['kind']}:{r['sha256']}:{r['autotune_choice']}" for r in rows)
    return _sha(text.encode())


# --- where two artifacts differ --------------------------------------------------------------

SHF_ALLOC = 0x2
#: Allocated, but a digest of the whole file (debug info included), not code or data.
_NOT_RUN = (".note.gnu.build-id",)


def elf_sections(data: bytes, *, allocated_only: bool = False) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of a 64-bit little-endian ELF file; [] otherwise.
    ``allocated_only`` keeps the sections the loader maps (SHF_ALLOC)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        return []
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off = headers[shstrndx][4]

    def name(idx: int) -> str:
        end = data.find(b"\0", str_off + idx)
        return data[str_off + idx : end].decode(errors="replace") if end >= 0 else "?"

    # (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size); SHT_NOBITS (8) occupies no file bytes
    return [
        (name(h[0]), h[4], 0 if h[1] == 8 else h[5])
        for h in headers
        if h[1] != 0 and (not allocated_only or h[2] & SHF_ALLOC)
    ]


def loaded_sha256(data: bytes) -> str:
    """sha256 over the name and bytes of every allocated section except the build-id note, in
    file order: what the loader maps and runs. Empty when ``data`` is not a 64-bit ELF file."""
    sections = elf_sections(data, allocated_only=True)
    if not sections:
        return ""
    h = hashlib.sha256()
    for name, off, size in sections:
        if name not in _NOT_RUN:
            h.update(name.encode() + b"\0" + data[off : off + size])
    return h.hexdigest()


def describe_byte_difference(a: bytes, b: bytes, limit: int = 6) -> str:
    """Measured difference between two artifacts: sizes, differing byte count, first differing
    offset and, for ELF files, the sections holding the differing bytes (with counts)."""
    if a == b:
        return "identical bytes"
    common = min(len(a), len(b))
    diffs = [i for i in range(common) if a[i] != b[i]]
    parts = [f"{len(a)} vs {len(b)} bytes"]
    if diffs:
        parts.append(f"{len(diffs)} differing bytes in the common {common}, first at offset {diffs[0]:#x}")
    elif len(a) != len(b):
        parts.append(f"equal over the common {common} bytes, one file is longer")
    sections = elf_sections(a)
    if sections and loaded_sha256(a) and loaded_sha256(b):
        same = loaded_sha256(a) == loaded_sha256(b)
        parts.append(
            "the allocated (loaded) sections are "
            + ("identical: only sections the loader does not map differ" if same else "different")
        )
    if sections and diffs:
        counts: dict[str, int] = {}
        for i in diffs:
            owner = next((n for n, off, size in sections if off <= i < off + size), "(outside every section)")
            counts[owner] = counts.get(owner, 0) + 1
        top = sorted(counts.items(), key=lambda kv: -kv[1])
        parts.append(
            "differing bytes by ELF section: "
            + ", ".join(f"{n} {c}" for n, c in top[:limit])
            + (f", ... {len(top) - limit} more sections" if len(top) > limit else "")
        )
    return "; ".join(parts)
