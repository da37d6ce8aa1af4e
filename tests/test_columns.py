"""One decoder of the list-valued row columns, for every form they arrive in."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernelcast.columns import decode_args, decode_sizes


@pytest.mark.parametrize("value, expect", [
    ([1024, 4], (1024, 4)), (np.array([64], dtype=np.int64), (64,)), ("[256, 2, 2]", (256, 2, 2)),
    (None, None), (float("nan"), None), ("", None), ([], None), (np.array([]), None),
])
def test_decode_sizes(value, expect):
    assert decode_sizes(value) == expect


def test_decode_args_forms():
    a = [{"name": "n", "kind": "scalar", "value": "8"}]
    assert decode_args(a) == a and decode_args(a)[0] is not a[0]          # a copy
    assert decode_args('[{"name": "n", "kind": "scalar", "value": "8"}]') == a
    assert decode_args(None) == [] and decode_args(float("nan")) == []
    # what a Parquet round trip hands back: an object array of dicts
    df = pd.DataFrame({"args": [a]})
    assert decode_args(df["args"].iloc[0]) == a
