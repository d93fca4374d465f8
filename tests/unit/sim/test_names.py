"""The simulated cluster's names: distinct by construction, reproducible per seed."""

from __future__ import annotations

import random
import re

import pytest

from nodeheal.sim.cluster.names import (
    SUFFIX_ALPHABET,
    DistinctNames,
    NameSpaceExhaustedError,
    PrivateDnsNames,
    SuffixGenerator,
)


@pytest.mark.parametrize("size", [1, 2, 3, 27, 64, 1000, 43472])
def test_every_index_of_the_space_comes_exactly_once(size: int) -> None:
    names = DistinctNames(size, random.Random(7))
    drawn = [names.take() for _ in range(size)]
    assert sorted(drawn) == list(range(size))
    with pytest.raises(NameSpaceExhaustedError):
        names.take()


def test_suffixes_never_repeat_where_random_draws_would() -> None:
    # 27^5 suffixes: random draws collide after a few thousand (the 1,000-node storm did).
    generate = SuffixGenerator(random.Random(7))
    suffixes = [generate() for _ in range(50_000)]
    assert len(set(suffixes)) == len(suffixes)
    assert all(len(s) == 5 and set(s) <= set(SUFFIX_ALPHABET) for s in suffixes)


def test_names_are_reproducible_per_seed_and_differ_between_seeds() -> None:
    def draw(seed: int) -> list[str]:
        generate = SuffixGenerator(random.Random(seed))
        return [generate() for _ in range(20)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_private_dns_names_cover_the_address_space_once() -> None:
    names = PrivateDnsNames("us-west-2", random.Random(7))
    size = len(PrivateDnsNames.THIRD) * len(PrivateDnsNames.FOURTH)
    drawn = [names() for _ in range(size)]
    assert len(set(drawn)) == size
    pattern = re.compile(r"^ip-10-0-(\d+)-(\d+)\.us-west-2\.compute\.internal$")
    for name in drawn[:100]:
        match = pattern.match(name)
        assert match is not None
        assert 16 <= int(match[1]) <= 191 and 4 <= int(match[2]) <= 250
    with pytest.raises(NameSpaceExhaustedError):
        names()
