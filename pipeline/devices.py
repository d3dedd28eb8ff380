"""Compute devices: which torch device strings a run accepts, and what a device is called.

A run names its device the way torch does (``cpu``, ``cuda``, ``cuda:1``, ``xpu``, ``npu:0`` for
the ``torch_npu`` plug-in, ``mps``) or ``auto``. :func:`check_device` turns that name into a
``torch.device`` after asking torch whether this machine has it, so a typo or a missing backend
stops the run before any work with an error that says what is available instead.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import platform
from typing import Any

import torch

#: Device types a run may name, in the order ``auto`` prefers them.
ACCELERATORS = ("cuda", "xpu", "npu", "mps")
DEVICE_TYPES = ("cpu", *ACCELERATORS)


class DeviceError(ValueError):
    """A device name torch does not know, or a device this machine does not have."""


def _backend(kind: str) -> Any:
    """The torch module of an accelerator type, or ``None`` when this build has none."""
    if kind == "mps":
        return getattr(torch.backends, "mps", None)
    return getattr(torch, kind, None)  # torch.npu exists only once torch_npu is imported


def _ensure_plugin(kind: str) -> None:
    """Out-of-tree backends register themselves on import (``torch_npu`` adds ``torch.npu``)."""
    if kind == "npu" and not hasattr(torch, "npu"):
        with contextlib.suppress(ImportError):
            importlib.import_module("torch_npu")


def is_available(kind: str) -> bool:
    """Whether torch reports a usable device of type ``kind`` here."""
    if kind == "cpu":
        return True
    _ensure_plugin(kind)
    backend = _backend(kind)
    try:
        return bool(backend is not None and backend.is_available())
    except Exception:  # noqa: BLE001 - a broken driver means "not available", not a crash
        return False


def device_count(kind: str) -> int:
    """How many devices of type ``kind`` torch sees (1 for cpu and mps, which have no index)."""
    if kind in ("cpu", "mps"):
        return 1 if is_available(kind) else 0
    if not is_available(kind):
        return 0
    return int(_backend(kind).device_count())


def available_devices() -> list[str]:
    """Every device string this machine accepts, e.g. ``['cpu', 'cuda:0', 'cuda:1']``."""
    out = ["cpu"]
    for kind in ACCELERATORS:
        n = device_count(kind)
        out += [kind] if kind == "mps" and n else [f"{kind}:{i}" for i in range(n)]
    return out


def check_device(name: str) -> torch.device:
    """The ``torch.device`` for ``name`` (``auto`` picks the first accelerator present, else cpu).

    Raises :class:`DeviceError` naming the problem and the devices available when ``name`` is not
    a device string, its type is not one torch runs experiments on, this machine has no such
    backend, or the index is past the device count.

    >>> check_device("cpu")
    device(type='cpu')
    """
    if not isinstance(name, str) or not name.strip():
        raise DeviceError(f"device must be a non-empty string such as 'cpu' or 'cuda:0', got {name!r}")
    name = name.strip()
    if name == "auto":
        kind = next((k for k in ACCELERATORS if is_available(k)), "cpu")
        return torch.device(kind)
    kind, _, index = name.partition(":")
    if kind not in DEVICE_TYPES:
        raise DeviceError(
            f"unknown device type {kind!r} in {name!r}; expected auto or one of "
            f"{', '.join(DEVICE_TYPES)} (optionally with ':<index>')"
        )
    if index and not index.isdigit():
        raise DeviceError(f"device index in {name!r} must be a non-negative integer, got {index!r}")
    if kind == "cpu" and index not in ("", "0"):
        raise DeviceError(f"device {name!r}: the cpu has no index other than 0")
    if not is_available(kind):
        raise DeviceError(
            f"device {name!r} requested but torch reports no {kind} backend on this machine "
            f"(available: {', '.join(available_devices())})"
        )
    if index:
        count = device_count(kind)
        if int(index) >= count:
            raise DeviceError(
                f"device {name!r} requested but torch sees {count} {kind} device(s) "
                f"(available: {', '.join(available_devices())})"
            )
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (timing must not stop before the kernels do)."""
    if device.type != "cpu":
        backend = _backend(device.type)
        if device.type == "mps":
            torch.mps.synchronize()
        elif backend is not None and hasattr(backend, "synchronize"):
            backend.synchronize(device)


def device_name(device: torch.device) -> str:
    """The hardware behind ``device``: the GPU's product name, or the CPU model."""
    if device.type in ("cuda", "xpu", "npu"):
        backend = _backend(device.type)
        try:
            return str(backend.get_device_name(device))
        except Exception:  # noqa: BLE001 - provenance must never fail a run
            return device.type
    if device.type == "mps":
        return f"Apple {platform.machine()} (mps)"
    return cpu_model()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what the platform module reports)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return model


def device_versions(device: torch.device) -> dict[str, str]:
    """Driver and runtime versions a result depends on, for provenance (empty strings where none)."""
    out = {
        "torch_version": torch.__version__,
        "cuda_runtime": "",
        "hip_runtime": "",
        "driver": "",
        "compute_capability": "",
    }
    if device.type == "cuda":
        out["cuda_runtime"] = str(torch.version.cuda or "")
        out["hip_runtime"] = str(getattr(torch.version, "hip", None) or "")
        try:
            major, minor = torch.cuda.get_device_capability(device)
            out["compute_capability"] = f"{major}.{minor}"
        except Exception:  # noqa: BLE001
            pass
        out["driver"] = _nvidia_smi_driver()
    elif device.type == "xpu":
        out["driver"] = str(getattr(torch.version, "xpu", None) or "")
    return out


@functools.cache
def _nvidia_smi_driver() -> str:
    """The NVIDIA driver's version from ``nvidia-smi`` (empty where it is missing or fails); asked
    once per process: the driver does not change while a run lasts."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""
