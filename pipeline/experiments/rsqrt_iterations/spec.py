"""C3, rsqrt iterations: id, asset group and the input shape per profile."""

from dataclasses import dataclass

ID, GROUP = "C3", "C3_rsqrt_iterations"


@dataclass(frozen=True)
class RsqrtSizes:
    shape: tuple[int, int]  # [rows, cols] of the input


SIZES = {
    "smoke": RsqrtSizes(shape=(64, 64)),
    "default": RsqrtSizes(shape=(1024, 1024)),
    "gpu": RsqrtSizes(shape=(1024, 1024)),
    "seed": RsqrtSizes(shape=(1024, 1024)),
}
