"""The one way the suite derives a seed from several integers (a run's seed, a step, a window, a rank, ...).

Plain 64-bit arithmetic, so a seed never depends on the interpreter: the parts are mixed with xxHash64's lane step
(multiply by a large odd prime, rotate by 31, multiply by another), the mixing CPython's tuple hash uses, which is
why the static-masking copies and the per-step reseed draw exactly what they drew when they were computed with
`hash((...)) % 2**63`. Different tuples give unrelated seeds; the result is in [0, 2**63), valid for
`torch.Generator.manual_seed` and `torch.manual_seed`.
"""

from __future__ import annotations

_PRIME_1, _PRIME_2, _PRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_MASK_64 = 2 ** 64 - 1


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from non-negative integers: derive_seed(seed, step), derive_seed(seed, window, copy), ..."""
    if not parts or any(part < 0 for part in parts):
        raise ValueError(f"derive_seed needs one or more non-negative integers, got {parts}")
    accumulator = _PRIME_5
    for part in parts:
        accumulator = (accumulator + (part % (2 ** 61 - 1)) * _PRIME_2) & _MASK_64
        accumulator = ((accumulator << 31) | (accumulator >> 33)) & _MASK_64
        accumulator = (accumulator * _PRIME_1) & _MASK_64
    accumulator = (accumulator + (len(parts) ^ (_PRIME_5 ^ 3527539))) & _MASK_64
    if accumulator == _MASK_64:  # CPython reserves -1; keeping its substitute keeps the sequence identical
        accumulator = 1546275796
    return accumulator % 2 ** 63
