"""Reading a model OpenVINO's ``Core.compile_model`` compiled: its runtime nodes as fused units, a code text
that identifies the compiled program, and the properties that decide its numerics. The OpenVINO adapter
(:mod:`precisionkit.backends.openvino`) reads every model its capture sees compile with
:func:`read_compiled_model`; nothing here imports OpenVINO.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from .base import FusedUnit

#: OpenVINO element type names (as the CPU plugin writes them in a runtime node's
#: ``runtimePrecision``) -> torch dtype names. A name not listed is reported as OpenVINO writes it.
OV_TO_TORCH_PRECISION: dict[str, str] = {
    "f64": "float64",
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u64": "uint64",
    "u32": "uint32",
    "u16": "uint16",
    "u8": "uint8",
    "boolean": "bool",
}

# Runtime nodes that compute nothing: graph inputs and outputs and constants, by the CPU plugin's
# ``layerType`` and by the OpenVINO operation type.
_NOT_COMPUTING = frozenset({"Input", "Output", "Const", "Parameter", "Result", "Constant"})
# Names OpenVINO gives nodes that have none of their own: ``<Type>_<n>`` with a per-process counter
# (``Result_51``), between the separators of an original-names list.
_GENERATED_NAME = re.compile(r"(^|[/,])([A-Z][A-Za-z0-9]*)_\d+(?=$|[/,])")


def _rt_text(info: Any, key: str) -> str:
    """The value of ``key`` in a node's runtime info as text, ``""`` when absent or unreadable
    (the values are ``OVAny`` objects)."""
    try:
        value = info[key]
    except (KeyError, RuntimeError):
        return ""
    try:
        return str(value.astype(str))
    except (AttributeError, RuntimeError, TypeError):
        return str(getattr(value, "value", value))


def _property_text(value: Any) -> str:
    """A compiled model's or device's property as text: an element type by its short name
    (``bf16``), an enum member by its name (``PERFORMANCE``), a list joined by commas."""
    if isinstance(value, list | tuple):
        return ",".join(_property_text(v) for v in value)
    if hasattr(value, "to_string") and hasattr(value, "is_real"):  # openvino.Type
        return str(value.to_string())
    if hasattr(value, "name") and type(value).__module__.startswith("openvino"):
        return str(value.name)
    return str(value)


def torch_precision(ov_precision: str) -> str:
    """An OpenVINO element type name as a torch dtype name; unknown names unchanged, ``""`` for an
    empty or undefined one.

    >>> torch_precision("bf16"), torch_precision("f32"), torch_precision("undefined")
    ('bfloat16', 'float32', '')
    """
    if ov_precision in ("", "undefined", "dynamic"):
        return ""
    return OV_TO_TORCH_PRECISION.get(ov_precision, ov_precision)


def normalize_name(name: str) -> str:
    """``name`` with OpenVINO's counter-numbered names (``Result_51``) made process-independent.

    >>> normalize_name("mul/aten.mul.Tensor/Multiply,Multiply_1234")
    'mul/aten.mul.Tensor/Multiply,Multiply_#'
    >>> normalize_name("Result_51"), normalize_name("mul_1/aten.mul.Tensor/Multiply")
    ('Result_#', 'mul_1/aten.mul.Tensor/Multiply')
    """
    return _GENERATED_NAME.sub(r"\1\2_#", name)


@dataclass
class CompiledModelRecord:
    """What the adapter read from one model ``Core.compile_model`` compiled."""

    units: list[FusedUnit]
    code: str
    properties: dict[str, str]


def read_compiled_model(compiled: Any, source_model: Any = None) -> CompiledModelRecord:
    """Units, code text and properties of an OpenVINO ``CompiledModel``.

    One unit per node of the runtime model that computes something, in execution order: ``ops``
    are the original layer names the plugin merged into it (``<FX node>/<ATen op>/<OpenVINO op>``),
    ``precision`` its ``runtimePrecision`` as a torch dtype name, ``kind`` its ``layerType``.

    The code text lists the compiled model's inputs and outputs and every runtime node (type,
    implementation, runtime and output precisions, layout, original names) in execution order, with
    counter-numbered names normalized; ``source_model``, the model handed to ``compile_model``, adds
    a digest of its constants, so graphs that differ only in a constant differ in their code.
    """
    runtime = compiled.get_runtime_model()
    rows: list[tuple[int, int, Any]] = []
    for index, op in enumerate(runtime.get_ordered_ops()):
        info = op.get_rt_info()
        order = _rt_text(info, "execOrder")
        rows.append((int(order) if order.lstrip("-").isdigit() else 1 << 30, index, op))
    rows.sort(key=lambda row: (row[0], row[1]))

    lines = [
        "inputs: " + " ".join(_port_text(p) for p in compiled.inputs),
        "outputs: " + " ".join(_port_text(p) for p in compiled.outputs),
    ]
    if source_model is not None:
        lines.append("constants: " + _constants_digest(source_model))
    units: list[FusedUnit] = []
    for _order, _index, op in rows:
        info = op.get_rt_info()
        layer_type = _rt_text(info, "layerType")
        runtime_precision = _rt_text(info, "runtimePrecision")
        names = normalize_name(_rt_text(info, "originalLayersNames"))
        lines.append(
            " | ".join(
                (
                    layer_type,
                    _rt_text(info, "primitiveType"),
                    runtime_precision,
                    _rt_text(info, "outputPrecisions"),
                    _rt_text(info, "outputLayouts"),
                    names,
                )
            )
        )
        if layer_type in _NOT_COMPUTING or op.get_type_name() in _NOT_COMPUTING:
            continue
        units.append(
            FusedUnit(
                name=normalize_name(op.get_friendly_name()),
                ops=tuple(n for n in names.split(",") if n),
                precision=torch_precision(runtime_precision),
                kind=layer_type,
            )
        )
    return CompiledModelRecord(units=units, code="\n".join(lines), properties=_model_properties(compiled))


def _port_text(port: Any) -> str:
    try:
        return f"{port.get_element_type().to_string()}{port.get_partial_shape()}"
    except RuntimeError:
        return "?"


def _constants_digest(model: Any) -> str:
    """sha256 over the element type, shape and bytes of a model's constants, in graph order."""
    digest = hashlib.sha256()
    try:
        for op in model.get_ordered_ops():
            if op.get_type_name() == "Constant":
                digest.update(f"{op.get_element_type().to_string()}{list(op.get_shape())}".encode())
                digest.update(op.get_data().tobytes())
    except (AttributeError, RuntimeError, TypeError):
        return "unreadable"
    return digest.hexdigest()


#: Compiled-model properties that decide the numerics, read into provenance.
NUMERIC_PROPERTIES = ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT")


def _model_properties(compiled: Any) -> dict[str, str]:
    props: dict[str, str] = {}
    for key in (*NUMERIC_PROPERTIES, "INFERENCE_NUM_THREADS", "EXECUTION_DEVICES"):
        try:
            props[key] = _property_text(compiled.get_property(key))
        except RuntimeError:  # a device that does not report the property
            continue
    return props
