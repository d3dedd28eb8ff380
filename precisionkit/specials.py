"""Special values salted into a seeded draw: signed zeros, infinities, the smallest subnormal, NaN.

One implementation serves every caller that salts: an experiment drawing its activations calls
:func:`salt_specials` directly, and a reproducer (:mod:`precisionkit.repro`, values ``specials``)
pastes :data:`SOURCE`, the text of these two functions, into its standalone file, so the file draws
the very bits the experiment saw (the same device type, seed and call order give the same bits).

The functions use only ``torch`` and allocate on the buffer's own device, so the pasted text runs
unchanged on any device a reproducer draws on.
"""

from __future__ import annotations

import inspect

import torch


def special_values(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    info = torch.finfo(dtype)
    tiny = info.smallest_normal * info.eps  # the smallest subnormal of dtype: eps is 2**-mantissa_bits
    specials = [0.0, -0.0, float("inf"), float("-inf"), tiny, -tiny, float("nan")]
    return torch.tensor(specials, dtype=torch.float64, device=device)


def salt_specials(flat: torch.Tensor, dtype: torch.dtype, rng: torch.Generator) -> None:
    # One element in 64 (at least one of each value) set in place, cycling through the values; the
    # buffer is cut into equal stretches and each gets one at a randint position, so none collide.
    values = special_values(dtype, flat.device)
    count = min(flat.numel(), max(len(values), flat.numel() // 64))
    if count == 0:
        return
    stretch = flat.numel() // count
    where = torch.arange(count, device=flat.device) * stretch
    where += torch.randint(0, stretch, (count,), generator=rng, device=flat.device)
    flat[where] = values[torch.arange(count, device=flat.device) % len(values)]


#: The text of both functions, as a standalone file pastes it (one blank line between them).
SOURCE = inspect.getsource(special_values) + "\n" + inspect.getsource(salt_specials)
