import platform

import pytest

from bench.common.seeds import derive_seed


def test_seeds_are_63_bit_distinct_and_deterministic():
    seeds = {derive_seed(seed, step) for seed in range(4) for step in range(1000)}
    assert len(seeds) == 4000 and all(0 <= s < 2 ** 63 for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed(1, 2) != derive_seed(1, 2, 0)



def test_bad_parts_are_refused():
    with pytest.raises(ValueError):
        derive_seed()
    with pytest.raises(ValueError):
        derive_seed(1, -2)


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="compares with CPython's tuple hash")
def test_the_arithmetic_is_cpythons_tuple_hash():
    # the seeds runs used before this helper existed (hash((seed, ...)) % 2**63) are drawn again
    for parts in [(0, 0, 0), (3, 17, 1), (2 ** 40, 5, 7), (1, 2), (9,)]:
        assert derive_seed(*parts) == hash(parts) % 2 ** 63
