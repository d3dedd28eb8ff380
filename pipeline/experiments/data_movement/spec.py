"""D, pure data movement: id, asset group and the activation shapes per profile (odd sizes included)."""

from dataclasses import dataclass

ID, GROUP = "D", "D_data_movement"


@dataclass(frozen=True)
class MovementSizes:
    shapes: tuple[tuple[int, ...], ...]  # activation shapes of the data-movement graphs


SIZES = {
    "smoke": MovementSizes(shapes=((2, 8, 16), (1, 7, 24))),
    "default": MovementSizes(shapes=((4, 128, 256), (2, 77, 200), (1, 333, 96))),
    "seed": MovementSizes(shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128))),
}
