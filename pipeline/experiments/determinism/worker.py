"""One determinism round of task A: compile the FFN first half, run it N times, hash every output.

The same :func:`run_round` serves the in-process round (round 1) and the fresh-process rounds.
A fresh round runs as::

    python -m pipeline.experiments.determinism.worker --inputs in.safetensors --out DIR --runs N \
        --dtypes float16,bfloat16 [--threads T] [--device cpu] [--backend inductor] [--options '{}']

(``--runs float16=1000,float32=100`` gives each dtype its own count.)

with the caller's environment pointing Inductor at an empty cache (:func:`cold_cache_env`) and the
compiler's adapter turning its in-process caches off (:meth:`~precisionkit.backends.base.BackendAdapter.disable_caches`).
The worker writes ``DIR/result.json`` (hashes, code hash, evidence, cache facts) and
``DIR/outputs.safetensors`` (one tensor per distinct output hash, so the caller can measure ULP
distances between rounds) and ``DIR/artifacts/<dtype>/<kernel>.bin``, the compiled artifact of every
generated kernel (:mod:`pipeline.artifacts`), so the caller can measure which bytes differ. The kernels'
binaries are read through the adapter (:meth:`~precisionkit.backends.base.BackendAdapter.compiled_modules`):
a compiler that exposes none has no artifact part, and its record says why.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from precisionkit import FusedFunction, FusionError, fused
from precisionkit.backends import adapter_for_backend
from precisionkit.evidence import evidence_fields

from ...artifacts import KernelArtifact, combined_sha256, kernel_artifacts
from ...backends import ensure_registered, register_by
from ...devices import synchronize
from ...intents import declined
from ...workloads import DTYPES, WORKLOADS

#: Distinct outputs kept per dtype: enough to measure how far apart they are, bounded on disk.
MAX_DISTINCT_KEPT = 8


def cold_cache_env(cache_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a compile that can reuse nothing: a fresh cache folder, every cache off."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": cache_dir,
            "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0",
            "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "0",
            "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE": "0",
            "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
        }
    )
    return env


def output_md5(out: torch.Tensor) -> str:
    """md5 of the output's raw bytes (C order, on the CPU)."""
    flat = out.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    return hashlib.md5(flat.tobytes()).hexdigest()


def run_round(
    inputs: dict[str, torch.Tensor],
    dtypes: list[str],
    runs: int | Mapping[str, int],
    device: torch.device,
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
    artifact_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, torch.Tensor]]:
    """Compile the FFN once per dtype and run it ``runs`` times on the same inputs (``runs``: one
    count for every dtype, or a count per dtype).

    ``inputs`` holds ``"<dtype>/<arg>"`` tensors. Returns per dtype a JSON-friendly record
    (``hashes`` in run order, ``code_sha256`` of the normalized source, ``artifacts`` and
    ``artifact_sha256`` of the compiled kernels, evidence, timings) and the distinct outputs keyed
    ``"<dtype>/<md5>"`` (at most :data:`MAX_DISTINCT_KEPT` per dtype, first occurrences). With
    ``artifact_dir``, each kernel's artifact bytes are written to ``<artifact_dir>/<dtype>/<kernel>.bin``.
    With ``log``, progress lines of each dtype's runs go to it.

    A dtype whose FFN the compiler itself did not fuse (it ran the graph in torch after failing it, as
    OpenVINO does a bfloat16 one: :func:`pipeline.intents.declined`) still runs its rounds, and its record
    says why in ``not_fused``: its hashes are the fallback's, never a fused program's. A compiler whose
    kernel binaries cannot be read has no artifacts; ``artifacts_not_applicable`` says why.
    """
    counts = {d: runs if isinstance(runs, int) else runs.get(d, 0) for d in dtypes}
    if any(n < 1 for n in counts.values()):
        raise ValueError(f"runs must be at least 1, got {runs}")
    records: dict[str, dict[str, Any]] = {}
    distinct: dict[str, torch.Tensor] = {}
    for dtype in dtypes:
        n_runs = counts[dtype]
        args = _dtype_args(inputs, dtype, device)
        ensure_registered(backend)  # an offered backend (a fresh process: main registered it by --register)
        adapter = adapter_for_backend(backend)
        fn = fused(WORKLOADS["ffn"].fn, backend, options, dynamic=False)
        start = time.perf_counter()
        not_fused = None
        with adapter.compiled_modules() as modules:  # the compile happens in the first call
            try:
                first = fn(*args)
            except FusionError:
                not_fused = declined(fn)
                if not_fused is None:
                    raise
                first = fn(*args)  # what the compiler runs now: the fallback it chose
        # Read after the first call: on CUDA the autotuner has picked the launcher that runs.
        unreadable = "" if modules is not None else f"not applicable to {adapter.title}: {adapter.binaries_unreadable}"
        artifacts = [] if unreadable else kernel_artifacts(modules or [], fn.evidence.kernel_names)
        if artifact_dir is not None:
            _write_artifacts(artifacts, Path(artifact_dir) / dtype)
        steps: Iterable[int] = range(n_runs)
        if log is not None:  # imported here: the fresh-process worker does without dagster
            from ...progress import track

            steps = track(steps, log, f"{dtype} runs", total=n_runs)
        hashes, kept = _hash_runs(fn, args, first, steps, dtype)
        distinct.update(kept)
        synchronize(device)
        records[dtype] = _round_record(fn, artifacts, hashes, time.perf_counter() - start)
        records[dtype].update(not_fused=not_fused, artifacts_not_applicable=unreadable)
        if unreadable:
            records[dtype]["artifact_sha256"] = ""  # no binary was hashed
    return records, distinct


def _dtype_args(inputs: dict[str, torch.Tensor], dtype: str, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The FFN's arguments of the ``dtype`` set, on ``device``; a clear error when the dtype is
    unknown, an argument is missing or a tensor has another dtype."""
    workload = WORKLOADS["ffn"]
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    missing = [a for a in workload.arg_names if f"{dtype}/{a}" not in inputs]
    if missing:
        raise ValueError(f"inputs lack {', '.join(f'{dtype}/{a}' for a in missing)}")
    args = tuple(inputs[f"{dtype}/{a}"].to(device) for a in workload.arg_names)
    wrong = [a for a, t in zip(workload.arg_names, args, strict=False) if t.dtype != DTYPES[dtype]]
    if wrong:
        raise ValueError(f"inputs {wrong} of the {dtype} set are not {dtype}")
    return args


def artifact_file(folder: Path, kernel: str) -> Path:
    """``<folder>/<kernel>.bin``, every character of the unit's name that a file name cannot hold as
    ``_``: Inductor's kernel names are kept as they are, another compiler's unit names (OpenVINO's
    ``Convert_#/Unsqueeze``) become one file each.

    >>> artifact_file(Path("a"), "cpp_fused_add_0").name, artifact_file(Path("a"), "Convert_#/Unsqueeze").name
    ('cpp_fused_add_0.bin', 'Convert___Unsqueeze.bin')
    """
    return folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', kernel)}.bin"


def _write_artifacts(artifacts: list[KernelArtifact], folder: Path) -> None:
    """Each kernel's artifact bytes to :func:`artifact_file`."""
    folder.mkdir(parents=True, exist_ok=True)
    for art in artifacts:
        artifact_file(folder, art.kernel).write_bytes(art.data)


def _hash_runs(
    fn: FusedFunction, args: tuple[torch.Tensor, ...], first: torch.Tensor, steps: Iterable[int], dtype: str
) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The md5 of every run's output in run order (run 0 is ``first``, already computed), and the
    first :data:`MAX_DISTINCT_KEPT` distinct outputs keyed ``"<dtype>/<md5>"`` (on the CPU).

    Each run is compared bit for bit, on the device, with the distinct outputs seen so far
    (:func:`same_bits`); a run equal to one of them reuses its md5, and only a new distinct output is
    copied to the host and hashed. So a deterministic round reads back one output in all and a bool
    per run, not the whole output every run. Up to :data:`MAX_DISTINCT_KEPT` distinct outputs stay on
    the device for the comparison; beyond that a run that matches none of them is hashed on the host.
    """
    hashes: list[str] = []
    kept: dict[str, torch.Tensor] = {}
    seen: list[tuple[torch.Tensor, str]] = []  # distinct outputs on the device, with their md5
    for i in steps:
        out = (first if i == 0 else fn(*args)).detach()
        digest = next((h for ref, h in seen if same_bits(ref, out)), None)
        if digest is None:  # a new distinct output: one copy to the host, hashed and kept there
            host = out.cpu()
            if host.data_ptr() == out.data_ptr():
                host = host.clone()  # already on the CPU: keep a copy of its own
            digest = output_md5(host)
            if len(seen) < MAX_DISTINCT_KEPT:
                # A copy: a backend may hand back the same buffer on every call (CUDA graphs).
                seen.append((out.clone(), digest))
            key = f"{dtype}/{digest}"
            if key not in kept and len(kept) < MAX_DISTINCT_KEPT:
                kept[key] = host
        hashes.append(digest)
    return hashes, kept


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bits in the same shape and dtype, compared where they
    are (on the device): through an integer view, so NaNs with the same payload are equal and
    ``-0.0`` differs from ``0.0``, as they do in :func:`output_md5`."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point():
        bits = _BITS_OF_SIZE[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    return torch.equal(a, b)


#: Integer dtypes by element size, for comparing floating-point tensors bit for bit.
_BITS_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


#: Fusion evidence in a round's record (compared across rounds by :mod:`.compare`).
_RECORD_EVIDENCE = (
    "code_sha256",
    "kernel_count",
    "kernel_names",
    "extern_calls",
    "graph_count",
    "graph_breaks",
    "recompiles",
    "compile_seconds",
    "precisions",
)


def _round_record(
    fn: FusedFunction, artifacts: list[KernelArtifact], hashes: list[str], seconds: float
) -> dict[str, Any]:
    """The JSON-friendly record of one dtype's round: hashes, code and artifact hashes, evidence, timings."""
    return {
        "hashes": hashes,
        "artifacts": [a.record() for a in artifacts],
        "artifact_sha256": combined_sha256(artifacts),
        **evidence_fields(fn.evidence, _RECORD_EVIDENCE),
        "seconds_all_runs": seconds,
        "threads": torch.get_num_threads(),
        "code": fn.code,
    }


def format_runs(runs: Mapping[str, int]) -> str:
    """``--runs`` of a count per dtype: ``float16=1000,float32=100``."""
    return ",".join(f"{d}={n}" for d, n in runs.items())


def parse_runs(text: str) -> int | dict[str, int]:
    """``--runs``: one count (``1000``) or a count per dtype (``float16=1000,float32=100``)."""
    if "=" not in text:
        return int(text)
    return {d.strip(): int(n) for d, _, n in (part.partition("=") for part in text.split(",") if part)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of a fresh-process round; see the module docstring for the arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", required=True, help="safetensors file of <dtype>/<arg> tensors")
    parser.add_argument("--out", required=True, help="folder for result.json and outputs.safetensors")
    parser.add_argument("--runs", required=True, help="runs per dtype: N, or dtype=N,dtype=N")
    parser.add_argument("--dtypes", required=True, help="comma-separated dtype names")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 keeps the default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--options", default="{}", help="JSON object of the compiler's options")
    parser.add_argument(
        "--register", default="", help="module:function that registers an offered backend (pipeline.backends.registrar)"
    )
    args = parser.parse_args(argv)

    if args.threads < 0:
        parser.error(f"--threads must be >= 0, got {args.threads}")
    try:
        runs = parse_runs(args.runs)
    except ValueError:
        parser.error(f"--runs must be N or dtype=N,dtype=N, got {args.runs!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.register:
        register_by(args.register)
    # The environment already turns the caches off; the compiler's adapter sets the in-process switches
    # too (Inductor's autotune_local_cache has no environment variable of its own) and says what it found.
    ensure_registered(args.backend)
    facts = adapter_for_backend(args.backend).disable_caches()
    inputs = load_file(args.inputs)
    records, distinct = run_round(
        inputs,
        [d for d in args.dtypes.split(",") if d],
        runs,
        torch.device(args.device),
        args.backend,
        json.loads(args.options),
        artifact_dir=Path(args.out) / "artifacts",
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(distinct, str(out / "outputs.safetensors"))
    (out / "result.json").write_text(
        json.dumps({"records": records, "pid": os.getpid(), "torch_version": torch.__version__, **facts})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
