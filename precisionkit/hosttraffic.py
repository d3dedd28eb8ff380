"""Count what a piece of code reads back from the compute device: transfers to the host and syncs.

A device-to-host read stalls the host until the device has finished everything queued before it,
then moves bytes over the bus. A loop that reads a large output back on every iteration can cost
hundreds of times the device work it measures, so a budget on these reads is worth a test.
:class:`HostTraffic` is a :class:`torch.overrides.TorchFunctionMode` that records every such read
made from Python while it is active::

    with HostTraffic() as traffic:
        loop()
    assert traffic.bytes <= 4096 * runs

What counts (one :class:`HostRead` each, with the bytes that reach the host):

* copies to the host: ``t.cpu()``, ``t.to("cpu")`` / ``t.to(device="cpu")`` / ``t.to(cpu_tensor)``,
  ``cpu_tensor.copy_(t)``: the bytes of ``t``;
* reads into Python or NumPy: ``t.numpy()``, ``np.asarray(t)`` (``__array__``), ``t.tolist()``,
  ``repr(t)`` / ``str(t)`` (``__repr__``), ``format(t)``: the bytes of ``t``; ``t.item()``, ``bool(t)``,
  ``float(t)``, ``int(t)``, ``complex(t)``, ``operator.index(t)``: one element;
* comparisons that return a Python bool, so the host waits for them: ``torch.equal`` and
  ``torch.allclose`` (``t.equal``, ``t.allclose``), ``torch.is_nonzero``: one byte.

Which tensors count: on an accelerator a read is a transfer only when its source tensor is on the
accelerator, so a tensor already on the CPU counts only with ``count_cpu=True``. With
``count_cpu=True`` (the default) the counter also serves a CPU-only machine: every read above of a
CPU tensor counts as the transfer it would be if that tensor lived on an accelerator, so a budget
test holds the same code to the same numbers on a CPU runner and on a GPU. Emulation aside, a read
of a tensor that an earlier counted copy just brought to the host (the object ``t.cpu()``
returned, the destination of ``copy_``) does not count again: ``t.cpu().numpy()`` is one transfer
of ``t``'s bytes. On the CPU, ``t.cpu()`` and ``t.to("cpu")`` return ``t`` itself; under the counter
they return an alias of ``t`` (a view of the same memory) instead, so that ``t`` stays a "device"
tensor and a second ``t.cpu()`` counts again, as it would on an accelerator.

Not counted: reads made from C++ without passing through Python (a custom op's own syncs, the
allocator), pickling or saving a tensor (``torch.save``, safetensors), and anything inside a
compiled function: :class:`precisionkit.FusedFunction` runs its compiled code with the counter
stepped aside (:func:`suspended`), since Dynamo guards on the active function modes and would
otherwise recompile; its compiled graph has no host reads of its own (a graph break is refused).
Call a plain ``torch.compile`` function inside ``with suspended():`` for the same reason.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The stack of active function modes has no public accessors; these private ones are what
# torch.overrides itself uses. A torch release without them still imports this module (and
# precisionkit): counting works, and only stepping a counter aside (suspended) refuses, with the reason.
try:
    from torch._C import _len_torch_function_stack, _pop_torch_function_stack, _push_on_torch_function_stack

    _STACK_API = True
except ImportError:  # pragma: no cover - depends on the torch release
    _STACK_API = False

__all__ = ["HostRead", "HostTraffic", "suspended"]

#: Counters entered and not yet left (in any thread): :func:`suspended` costs nothing while it is 0.
_active_counters = 0

_T = torch.Tensor

#: Reads that bring a whole tensor to the host and return a host tensor (later reads of it are free).
_COPIES: dict[Callable[..., Any], str] = {_T.cpu: "cpu"}
#: Reads that bring a whole tensor into Python or NumPy.
_WHOLE: dict[Callable[..., Any], str] = {
    _T.numpy: "numpy",
    _T.__array__: "__array__",
    _T.tolist: "tolist",
    _T.__repr__: "__repr__",
    _T.__format__: "__format__",
}
#: Reads of one element into a Python scalar.
_SCALAR: dict[Callable[..., Any], str] = {
    _T.item: "item",
    _T.__bool__: "__bool__",
    _T.__float__: "__float__",
    _T.__int__: "__int__",
    _T.__complex__: "__complex__",
    _T.__index__: "__index__",
}
#: Comparisons whose Python bool result the host waits for.
_SYNCS: dict[Callable[..., Any], str] = {
    torch.equal: "equal",
    _T.equal: "equal",
    torch.allclose: "allclose",
    _T.allclose: "allclose",
    torch.is_nonzero: "is_nonzero",
}


@dataclass(frozen=True)
class HostRead:
    """One read from the device: the call (``"cpu"``, ``"item"``, ``"to"``, ``"copy_"``, ...), the
    bytes that reach the host, the source tensor's device and whether it was emulated (a CPU tensor
    counted as if it lived on an accelerator)."""

    op: str
    bytes: int
    device: str
    emulated: bool
    #: The code that made it: ``module:line`` of the innermost frame outside this counter (a library's
    #: own read names the library, e.g. ``torch.optim.adam:...``); ``""`` when no frame is found.
    where: str = ""


def _caller() -> str:
    """``module:line`` of the innermost frame outside this module and the function-mode machinery."""
    frame = inspect.currentframe()
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module not in (__name__, "torch.overrides", "torch.utils._python_dispatch", "contextlib"):
            return f"{module}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _is_cpu(device: torch.device | str | int | None) -> bool:
    if device is None or isinstance(device, int):
        return False
    return torch.device(device).type == "cpu"


def _to_target_is_cpu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the CPU as its target device."""
    if "device" in kwargs:
        return _is_cpu(kwargs["device"])
    if "other" in kwargs:
        return bool(kwargs["other"].device.type == "cpu")
    for a in args[1:]:
        if isinstance(a, torch.Tensor):
            return a.device.type == "cpu"
        if isinstance(a, (str, torch.device)):
            return _is_cpu(a)
    return False


class HostTraffic(TorchFunctionMode):
    """Records every device-to-host read made from Python while active (see the module docstring).

    ``reads`` lists them in order; :attr:`count` and :attr:`bytes` total them and :meth:`by_op`
    groups them by call. ``count_cpu``: whether reads of CPU tensors count (emulating an
    accelerator); with ``False`` only tensors on an accelerator count.

    >>> import torch
    >>> x = torch.zeros(4, 8)
    >>> with HostTraffic() as traffic:
    ...     _ = x.sum().item()
    ...     _ = x.cpu().numpy()
    >>> traffic.count, traffic.bytes
    (2, 132)
    """

    def __init__(self, count_cpu: bool = True) -> None:
        super().__init__()
        self.count_cpu = count_cpu
        self.reads: list[HostRead] = []
        # Host copies this counter made, by id (a tensor's == is elementwise, so no WeakSet):
        # reading them again moves nothing over the bus.
        self._host: dict[int, weakref.ref[torch.Tensor]] = {}

    @property
    def count(self) -> int:
        """Number of reads."""
        return len(self.reads)

    @property
    def bytes(self) -> int:
        """Bytes that reached the host over all reads."""
        return sum(r.bytes for r in self.reads)

    def by_op(self) -> dict[str, tuple[int, int]]:
        """``{op: (reads, bytes)}`` over all reads."""
        calls: Counter[str] = Counter()
        size: Counter[str] = Counter()
        for r in self.reads:
            calls[r.op] += 1
            size[r.op] += r.bytes
        return {op: (calls[op], size[op]) for op in calls}

    def __enter__(self) -> HostTraffic:
        global _active_counters
        super().__enter__()
        _active_counters += 1
        return self

    def __exit__(self, *exc: object) -> None:
        global _active_counters
        _active_counters -= 1
        super().__exit__(*exc)

    def reset(self) -> None:
        """Forget the reads recorded so far."""
        self.reads.clear()

    def _record(self, op: str, source: torch.Tensor, nbytes: int) -> bool:
        """Record a read of ``source`` when it counts; returns whether it did."""
        on_cpu = source.device.type == "cpu"
        if (on_cpu and not self.count_cpu) or self._is_host_copy(source):
            return False
        self.reads.append(HostRead(op, nbytes, str(source.device), on_cpu, _caller()))
        return True

    def _is_host_copy(self, t: torch.Tensor) -> bool:
        ref = self._host.get(id(t))
        return ref is not None and ref() is t

    def _mark_host_copy(self, t: torch.Tensor) -> None:
        key = id(t)
        self._host[key] = weakref.ref(t, lambda _: self._host.pop(key, None))

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor):
            return func(*args, **kwargs)
        if func in _SCALAR:
            self._record(_SCALAR[func], first, first.element_size())
        elif func in _WHOLE:
            self._record(_WHOLE[func], first, _nbytes(first))
        elif func in _SYNCS:
            self._record(_SYNCS[func], first, 1)
        elif func in _COPIES or (func is _T.to and _to_target_is_cpu(args, kwargs)):
            return self._copy_to_host("cpu" if func in _COPIES else "to", func, first, args, kwargs)
        elif func is _T.copy_ and first.device.type == "cpu" and len(args) > 1:
            src = args[1]
            if isinstance(src, torch.Tensor) and self._record("copy_", src, _nbytes(src)):
                self._mark_host_copy(first)
        return func(*args, **kwargs)

    def _copy_to_host(
        self, op: str, func: Callable[..., Any], source: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        counted = self._record(op, source, _nbytes(source))
        out = func(*args, **kwargs)
        if counted:
            if out is source:  # a CPU tensor: keep ``source`` a "device" tensor, hand back an alias
                out = source.view_as(source)
            self._mark_host_copy(out)
        return out


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Step every active :class:`HostTraffic` aside for the block (other function modes stay).

    Dynamo guards on the stack of active function modes, so a compiled function called under a
    counter would recompile; call it in this block instead. Costs nothing when no counter is active.
    Raises :class:`RuntimeError` under a counter when this torch release lacks the private mode-stack
    functions it needs (see the imports).
    """
    if _active_counters == 0:
        yield
        return
    if not _STACK_API:
        raise RuntimeError(
            f"HostTraffic cannot step aside on torch {torch.__version__}: torch._C lacks "
            "_len_torch_function_stack, _pop_torch_function_stack or _push_on_torch_function_stack"
        )
    stack = [_pop_torch_function_stack() for _ in range(_len_torch_function_stack())]
    stack.reverse()  # bottom first
    try:
        for mode in stack:
            if not isinstance(mode, HostTraffic):
                _push_on_torch_function_stack(mode)
        yield
    finally:
        for _ in range(_len_torch_function_stack()):
            _pop_torch_function_stack()
        for mode in stack:
            _push_on_torch_function_stack(mode)
