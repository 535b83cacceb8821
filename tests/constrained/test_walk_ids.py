"""``testing.walks.allowed_ids``: the ids of a filled bitmask row, as the benchmarks' walks read
them (the same ids, in the same order, as the list the walks used to build)."""

from __future__ import annotations

import random

import pytest
import torch
from radixlm.constrained.testing.walks import allowed_ids

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


def test_allowed_ids_are_the_set_bits_in_order():
    rng = random.Random(0)
    row = torch.tensor([rng.getrandbits(32) - 2**31 for _ in range(37)] + [0, -1, 1, -2**31], dtype=torch.int32)
    expected = [w * 32 + b for w, word in enumerate(row.tolist()) for b in range(32) if (word >> b) & 1]
    ids = allowed_ids(row)
    assert ids.tolist() == expected
    choice = random.Random(5)
    assert int(ids[choice.randrange(len(ids))]) == random.Random(5).choice(expected)  # the walks' pick
