"""Names the simulated cluster hands out: distinct by construction, random-looking, reproducible.

Kubernetes' generateName draws a 5-character suffix at random and the API server answers
AlreadyExists when it collides; a simulation that draws the same way collides too once it builds
a few thousand pods (the birthday bound of 27^5 is about 5,000 draws). Here the n-th name is the
image of n under a seeded affine permutation of the whole name space, so no two names drawn from
one :class:`DistinctNames` are ever equal, and the sequence is the same for the same seed.
"""

from __future__ import annotations

import math
import random
import threading

#: What Kubernetes' generateName draws suffix characters from (no vowels, no look-alikes).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH = 5


class NameSpaceExhaustedError(RuntimeError):
    """Every name of the space has been handed out."""


class DistinctNames:
    """Indices 0..size-1 in a seeded, random-looking order, each exactly once (thread-safe).

    ``index -> (multiplier * index + offset) mod size`` is a bijection of ``range(size)`` whenever
    the multiplier is coprime with ``size``; the seed picks both.
    """

    def __init__(self, size: int, rng: random.Random) -> None:
        if size < 1:
            raise ValueError("a name space needs at least one name")
        self.size = size
        multiplier = rng.randrange(size // 3, max(size // 3 + 1, 2 * size // 3)) | 1
        while math.gcd(multiplier, size) != 1:
            multiplier += 1
        self._multiplier = multiplier % size if size > 1 else 0
        self._offset = rng.randrange(size)
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            if self._next >= self.size:
                raise NameSpaceExhaustedError(f"all {self.size} names of this space are taken")
            index = self._next
            self._next += 1
        return (self._multiplier * index + self._offset) % self.size

    @property
    def taken(self) -> int:
        with self._lock:
            return self._next


class SuffixGenerator:
    """generateName-style suffixes (``x7kq2``), never the same one twice."""

    def __init__(self, rng: random.Random) -> None:
        self._indices = DistinctNames(len(SUFFIX_ALPHABET) ** SUFFIX_LENGTH, rng)

    def __call__(self) -> str:
        value = self._indices.take()
        chars = []
        for _ in range(SUFFIX_LENGTH):
            value, digit = divmod(value, len(SUFFIX_ALPHABET))
            chars.append(SUFFIX_ALPHABET[digit])
        return "".join(chars)


class PrivateDnsNames:
    """EC2-style private DNS names ``ip-10-0-<third>-<fourth>.<region>.compute.internal``, each once."""

    THIRD = range(16, 192)
    FOURTH = range(4, 251)

    def __init__(self, region: str, rng: random.Random) -> None:
        self._region = region
        self._indices = DistinctNames(len(self.THIRD) * len(self.FOURTH), rng)

    def __call__(self) -> str:
        third, fourth = divmod(self._indices.take(), len(self.FOURTH))
        return f"ip-10-0-{self.THIRD[third]}-{self.FOURTH[fourth]}.{self._region}.compute.internal"
