"""C1, tensor x scalar instruction selection: id, asset group and the input shape per profile."""

from dataclasses import dataclass

ID, GROUP = "C1", "C1_instruction_selection"


@dataclass(frozen=True)
class InstructionSelectionSizes:
    shape: tuple[int, int]  # [rows, cols] of the input


SIZES = {
    "smoke": InstructionSelectionSizes(shape=(64, 64)),
    "default": InstructionSelectionSizes(shape=(1024, 1024)),
    "gpu": InstructionSelectionSizes(shape=(1024, 1024)),
    "seed": InstructionSelectionSizes(shape=(1024, 1024)),
}
