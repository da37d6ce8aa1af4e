from __future__ import annotations

import numpy as np
import pytest

from kernelcast.cltypes import parse_type, scalar_value


@pytest.mark.parametrize("name,base,width,itemsize", [
    ("float", "float", 1, 4), ("float4", "float", 4, 16), ("int2", "int", 2, 8), ("uchar", "uchar", 1, 1),
    ("double", "double", 1, 8), ("float3", "float", 3, 16), ("unsigned int", "uint", 1, 4),
    ("ulong8", "ulong", 8, 64), ("half", "half", 1, 2),
])
def test_parse_type(name, base, width, itemsize):
    t = parse_type(name)
    assert (t.base, t.width, t.itemsize) == (base, width, itemsize)


@pytest.mark.parametrize("bad", ["floaty", "float5", "struct foo", "", "size_t4", "image2d_t"])
def test_parse_type_rejects(bad):
    with pytest.raises(ValueError):
        parse_type(bad)


def test_scalar_values():
    assert scalar_value(parse_type("int"), "42") == np.int32(42)
    assert scalar_value(parse_type("uint"), "0x10") == np.uint32(16)
    assert scalar_value(parse_type("float"), "2.5").dtype == np.float32
    assert scalar_value(parse_type("char"), -128) == np.int8(-128)
    v = scalar_value(parse_type("float4"), "1,2,3,4")
    assert v.dtype == np.float32 and list(v) == [1, 2, 3, 4]
    v3 = scalar_value(parse_type("int3"), "7")
    assert list(v3) == [7, 7, 7, 0]          # 3-vectors occupy 4 slots
    with pytest.raises(ValueError, match="out of range"):
        scalar_value(parse_type("uchar"), "256")
    with pytest.raises(ValueError, match="not an integer"):
        scalar_value(parse_type("int"), "1.5")
    with pytest.raises(ValueError):
        scalar_value(parse_type("int2"), "1,2,3")
    with pytest.raises(ValueError):
        scalar_value(parse_type("int"), "abc")
