"""OpenVINO's precision hint under a capped oneDNN ISA.

The CPU plugin reads the CPU's own flags, while the oneDNN it bundles obeys ``ONEDNN_MAX_CPU_ISA``: with
that cap below bf16 (``AVX2``, how a bf16 CPU stands in for an AVX2-only one) the plugin still picks bf16
kernels, oneDNN refuses them, and every graph runs in torch. Under such a cap the adapter passes
``INFERENCE_PRECISION_HINT=f32`` unless the options name a hint (:func:`isa_capped_config`), which is the
plugin's own default on a CPU without bf16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``ONEDNN_MAX_CPU_ISA`` values below oneDNN's first ISA with bf16 arithmetic (``AVX512_CORE_BF16``).
NO_BF16_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI")


def isa_capped_config(options: Mapping[str, Any], max_isa: str) -> dict[str, Any]:
    """``options`` with ``INFERENCE_PRECISION_HINT=f32`` added to its ``config`` when ``max_isa`` (the
    ``ONEDNN_MAX_CPU_ISA`` value) caps oneDNN below bf16 and the options name no hint themselves.

    >>> isa_capped_config({}, "AVX2")
    {'config': {'INFERENCE_PRECISION_HINT': 'f32'}}
    >>> isa_capped_config({"config": {"INFERENCE_PRECISION_HINT": "bf16"}}, "avx2")["config"]
    {'INFERENCE_PRECISION_HINT': 'bf16'}
    >>> isa_capped_config({"aot_autograd": True}, "")
    {'aot_autograd': True}
    """
    out = dict(options)
    if max_isa.strip().upper() not in NO_BF16_ISAS:
        return out
    config = dict(out.get("config") or {})
    config.setdefault("INFERENCE_PRECISION_HINT", "f32")
    out["config"] = config
    return out
