"""Run configuration shared by every asset, shown (and editable) in the Dagster UI launchpad."""

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import torch
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from .backends import adapter_problem, ensure_registered, known_backends
from .devices import DeviceError, available_devices, check_device, cpu_model, device_name, device_versions
from .experiment import declared_sizes
from .profiles import PROFILES
from .source import source_provenance

PROFILE_NAMES = tuple(PROFILES)
#: The base seed of every input pool unless FUSION_SEED (or ``report --seed``) names another.
DEFAULT_SEED = 20241223


def device_choices() -> tuple[str, ...]:
    """The device strings this machine runs: ``auto``, ``cpu``, each accelerator type torch reports
    and each of its indices (e.g. ``cuda``, ``cuda:0``, ``cuda:1``)."""
    out = ["auto", "cpu"]
    for name in available_devices()[1:]:
        kind = name.partition(":")[0]
        out += [x for x in (kind, name) if x not in out]
    return tuple(out)


def _with_default(choices: tuple[str, ...], env: str, fallback: str) -> tuple[str, ...]:
    # A default taken from the environment stays selectable even when it is not a choice here, so
    # the code location still loads; a run with it is refused, with the reason, when it starts.
    default = os.environ.get(env, fallback)
    return choices if default in choices else (*choices, default)


# An enum in the launchpad's config schema, read when the code location loads: the UI refuses a
# device this machine lacks before a run starts.
# FUSION_EXTRA_DEVICES (comma-separated, e.g. "cuda,cuda:0") adds devices that run workers have
# and the machine loading the code location lacks (a CPU code server in front of GPU step pods).
_EXTRA_DEVICES = tuple(d.strip() for d in os.environ.get("FUSION_EXTRA_DEVICES", "").split(",") if d.strip())
_HERE = device_choices()
DEVICE_CHOICES = _with_default(_HERE + tuple(d for d in _EXTRA_DEVICES if d not in _HERE), "FUSION_DEVICE", "auto")

REPO_ROOT = Path(__file__).resolve().parent.parent


class ExperimentSettings(dg.ConfigurableResource):
    """Profile, compute device, fused backend and base seed of a run.

    Every field that can be wrong is checked by one validator (:meth:`_usable`), which asks the
    field's own problem function (:data:`FIELD_PROBLEMS`) and raises its one line: a bad profile,
    device, backend or options string gives one message each, whether the settings are built by the
    CLI (:func:`settings_problems`), a test, or a run building the resource."""

    # An enum in the config schema: the launchpad rejects an unknown profile before a run starts.
    # Built in Python, :meth:`_usable` explains a bad profile before pydantic's enum check is reached.
    profile: Literal[PROFILE_NAMES] = Field(  # type: ignore[valid-type]
        default_factory=lambda: os.environ.get("FUSION_PROFILE", "default"),
        validate_default=True,
        description="smoke | default | gpu | seed: sizes and counts only (default from FUSION_PROFILE)",
    )
    # The default is not validated: a FUSION_DEVICE this machine lacks still loads the code location,
    # and a run with it is refused, with the reason, when it builds the settings.
    device: Literal[DEVICE_CHOICES] = Field(  # type: ignore[valid-type]
        default_factory=lambda: os.environ.get("FUSION_DEVICE", "auto"),
        description="auto (the first accelerator torch reports, else cpu) or a device torch reports on the "
        "machine that loaded the code location: cpu, cuda, cuda:1, xpu, npu, mps (default from FUSION_DEVICE)",
    )
    device_label: str = Field(
        default_factory=lambda: os.environ.get("FUSION_DEVICE_LABEL", ""),
        description="the name results from this machine carry in reports (e.g. 'h100-node-3'); empty: the "
        "device's hardware name (default from FUSION_DEVICE_LABEL)",
    )
    # Free text, not an enum: a backend registered after the code location loads (a user's own, a
    # test's) must stay usable; a name torch does not know is refused when the run builds the settings.
    backend: str = Field(
        default_factory=lambda: os.environ.get("FUSION_BACKEND", "inductor"),
        validate_default=True,
        description="torch.compile backend of the fused path, by registered name, or a planted-bug backend "
        "(default from FUSION_BACKEND); an unknown name is refused with the list of registered ones",
    )
    backend_options: str = Field(
        default="{}", description='JSON object of compiler options, e.g. {"emulate_precision_casts": true}'
    )
    seed: int = Field(
        default_factory=lambda: int(os.environ.get("FUSION_SEED") or DEFAULT_SEED),
        description="base seed; every input pool derives from it (default from FUSION_SEED, else 20241223)",
    )
    keep_sets: bool | None = Field(
        default_factory=lambda: {"1": True, "0": False}.get(os.environ.get("FUSION_KEEP_SETS", "")),
        description="store S's input pools and fp64 references (true), or store a recipe and produce them again "
        "on the device where they are read (false); unset: the profile's choice, stored for smoke and default, "
        "regenerated for gpu and seed (default from FUSION_KEEP_SETS=1|0)",
    )
    workloads: str = Field(
        default_factory=lambda: os.environ.get("FUSION_WORKLOADS", ""),
        description="your own workloads for experiment M: module:NAME, comma separated (default from "
        "FUSION_WORKLOADS); each is checked when M's step starts, and a bad one fails it with one line",
    )

    # Before pydantic's own type checks, so each problem reads in the settings' words; every field is
    # validated separately, so settings with several problems name each of them once.
    @field_validator("profile", "device", "backend", "backend_options", mode="before")
    @classmethod
    def _usable(cls, value: Any, info: ValidationInfo) -> Any:
        problem = FIELD_PROBLEMS[str(info.field_name)]
        if isinstance(value, str) and (why := problem(value)) is not None:
            raise ValueError(why)
        return value

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # A run that asks for a planted-bug backend (from the launchpad or the CLI) registers the
        # planted backends with torch.compile in every process that runs a step (the harness that
        # scores them registers them itself).
        ensure_registered(self.backend)
        if self.torch_device().type == "cpu":
            # Inductor's vector-ISA probe, which a CPU run's provenance needs anyway, before any step
            # compiles: it checks the ISA the compiler cache was keyed with (:func:`cpu_capability`).
            cpu_capability()

    def torch_device(self) -> torch.device:
        """The run's torch device (``auto`` resolved), resolved once per process."""
        return resolve_device(self.device)

    def device_key(self) -> str:
        """The name this run's results are filed under when devices are compared side by side."""
        return self.device_label.strip() or device_name(self.torch_device())

    def fields(self) -> dict[str, Any]:
        """The settings as plain values, to build the same settings in another process (a lane worker):
        ``ExperimentSettings(**settings.fields())``. The resource itself does not pickle."""
        return {k: getattr(self, k) for k in type(self).model_fields}

    def options(self) -> dict[str, Any]:
        """The compiler options, parsed from ``backend_options`` (validated when the settings were built)."""
        return parse_backend_options(self.backend_options)

    def sizes(self, experiment: str) -> Any:
        """The typed sizes of ``experiment`` (its id) under this run's profile: the one way an asset reads
        its sizes, from the record the experiment declares them on (``Experiment.sizes``)."""
        return declared_sizes(experiment, self.profile)

    def derived_seed(self, *parts: object) -> int:
        """A stable seed for one named stream (e.g. ``("pool", "softmax", "normal")``)."""
        import hashlib

        digest = hashlib.sha256(":".join(map(str, (self.seed, *parts))).encode()).digest()
        return int.from_bytes(digest[:8], "little") & (2**63 - 1)

    def stores_sets(self) -> bool:
        """Whether S stores its pools and references (:attr:`keep_sets`, else the profile's choice)."""
        return self.keep_sets if self.keep_sets is not None else PROFILES[self.profile].store_sets

    def pool_set_seed(self, workload: str, distribution: str, index: int) -> int:
        """The seed of input set ``index`` of ``workload``'s ``distribution`` in S's pools: any set can be
        redrawn alone, by S that draws the pools and by an experiment that reads them (B)."""
        return self.derived_seed("pool", workload, distribution, index)

    def provenance(self) -> dict[str, Any]:
        """Where and how a materialization was produced. What describes the machine and the source
        (:func:`machine_provenance`) is computed once per process and device; only the settings'
        own fields are read per call."""
        device = self.torch_device()
        return {
            "profile": self.profile,
            "device": str(device),
            "device_label": self.device_key(),
            "backend": self.backend,
            "backend_options": self.backend_options,
            "seed": self.seed,
            **machine_provenance(str(device)),
            "cpu_threads": torch.get_num_threads(),  # per call: cheap, and a process may change it
        }


@functools.cache
def resolve_device(device: str) -> torch.device:
    """``device`` as a torch device, ``auto`` resolved; probed once per process and name (the
    devices of a machine do not change while a run lasts)."""
    return check_device(device)


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot run here, or None. The one place that decides device availability
    (the settings' validator asks it, :data:`FIELD_PROBLEMS`; the CLI reaches it through :func:`settings_problems`)."""
    try:
        resolve_device(device)
    except (DeviceError, ValueError) as exc:
        return str(exc)
    return None


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` is not a usable ``torch.compile`` backend name, or None (backends an experiment
    offers to register on demand, such as the planted-bug backends, count; so do compilers' adapters
    by name, and an adapter whose compiler is not installed here gets the one line that names the
    command installing it)."""
    known = known_backends()
    if backend in known:
        return adapter_problem(backend)
    return f"unknown torch.compile backend {backend!r}; registered: {', '.join(sorted(known))}"


def profile_problem(profile: str) -> str | None:
    """Why ``profile`` is not a profile, or None."""
    if profile in PROFILES:
        return None
    return f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}"


def parse_backend_options(text: str) -> dict[str, Any]:
    """``backend_options`` as a dict; a ValueError with the one line that says what is wrong with it."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"backend_options is not valid JSON: {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"backend_options must be a JSON object, got {text!r}")
    return value


def backend_options_problem(text: str) -> str | None:
    """Why ``text`` is not a JSON object of compiler options, or None."""
    try:
        parse_backend_options(text)
    except ValueError as exc:
        return str(exc)
    return None


#: The one check of each settings field that can be wrong, by field name (:meth:`ExperimentSettings._usable`).
FIELD_PROBLEMS: dict[str, Callable[[str], str | None]] = {
    "profile": profile_problem,
    "device": device_problem,
    "backend": backend_problem,
    "backend_options": backend_options_problem,
}


def validation_messages(exc: ValidationError) -> list[str]:
    """One line per problem of a settings validation error: the field's own message, or pydantic's
    (a value of the wrong type) prefixed with the field's name."""
    out = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if error["type"] == "value_error" and cause is not None:
            out.append(str(cause))
        else:
            out.append(f"{'.'.join(map(str, error['loc']))}: {error['msg']}")
    return out


def settings_problems(profile: str, device: str | None, backend: str, backend_options: str = "{}") -> list[str]:
    """Every reason the settings cannot run, each one line (empty when they can), from building them:
    the CLI asks this before anything runs, and a run building the resource gets the same lines.
    ``device`` None: not checked (the environment's default is used and left for the run)."""
    fields: dict[str, Any] = {"profile": profile, "backend": backend, "backend_options": backend_options}
    if device is not None:
        fields["device"] = device
    try:
        ExperimentSettings(**fields)
    except ValidationError as exc:
        return validation_messages(exc)
    return []


@functools.cache
def machine_provenance(device: str) -> dict[str, Any]:
    """The part of provenance that describes the machine and the source, once per process and
    device: hardware name, driver and runtime versions, the CPU and its vector
    instruction sets, and the source commit (:mod:`.source`). Inductor's vector-ISA probe (C++ test
    builds in child processes) runs only for a CPU run: on an accelerator the fused code is not
    Inductor's C++, and ``inductor_vec_isa`` says it was not probed."""
    dev = torch.device(device)
    return {
        "device_name": device_name(dev),
        **device_versions(dev),
        **(cpu_capability() if dev.type == "cpu" else cpu_summary(dev.type)),
        **source_provenance(),
    }


def cpu_summary(device_type: str) -> dict[str, str]:
    """The CPU fields of a run on an accelerator: the CPU model and ATen's CPU capability (both
    cheap), without Inductor's vector-ISA probe or the C++ compiler."""
    return {
        "cpu_model": cpu_model(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "inductor_vec_isa": f"not probed ({device_type} run)",
        "cxx": "",
    }


@functools.cache
def cpu_capability() -> dict[str, str]:
    """The CPU and the vector instruction sets torch uses on it: ATen's kernels (``cpu_capability``)
    and Inductor's generated C++ (``inductor_vec_isa``, probed by building test programs). Fused CPU
    code, and so its results, depend on both (e.g. a vectorized 16-bit transpose that differs from
    the scalar one)."""
    from .compile_cache import check_predicted_isa, compiler_version, probed_vec_isa

    isa = probed_vec_isa()
    check_predicted_isa(isa)  # the compiler cache is keyed by a prediction of it
    return {
        "cpu_model": cpu_model(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "inductor_vec_isa": isa,
        "cxx": compiler_version(),  # the C++ compiler Inductor builds fused CPU code with
    }


def git_commit() -> str:
    """The source commit this process runs (see :func:`.source.source_provenance`)."""
    return source_provenance()["git_commit"]
