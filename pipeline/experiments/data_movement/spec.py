"""D, pure data movement: id, asset group and the activation shapes per profile (odd sizes included)."""

from dataclasses import dataclass

ID, GROUP = "D", "D_data_movement"


@dataclass(frozen=True)
class MovementSizes:
    shapes: tuple[tuple[int, ...], ...]  # activation shapes of the data-movement graphs


SIZES = {
    "smoke": MovementSizes(shapes=((2, 8, 16), (1, 7, 24))),
    # Two shapes (a power-of-two one and one odd in every dim): each shape is 39 compiles, about a minute.
    "default": MovementSizes(shapes=((4, 128, 256), (2, 77, 200))),
    "gpu": MovementSizes(shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128))),
    "seed": MovementSizes(shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128))),
}
