"""C2's summation error bounds now live in :mod:`precisionkit.bounds` (the maths, its derivation and
:func:`~precisionkit.bounds.summation_error_bound`); import them from there.

Only the name one test still imports from here stays, until that import moves too.
"""

from precisionkit.bounds import gamma_tilde

__all__ = ["gamma_tilde"]
