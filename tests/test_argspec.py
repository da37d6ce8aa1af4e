from __future__ import annotations

import pytest

from kernelcast.argspec import SpecError, check_against_signature, parse_arg, parse_size
from kernelcast.clang import kernel_signatures

SRC = """
__kernel void k(__global const float4* a, __global int* out, __local float* tmp, const int n, float s) {
  int i = get_global_id(0);
  if (i < n) out[i] = (int)(a[i].x * s) + (int)tmp[0];
}
"""


def test_parse_size():
    assert parse_size("1048576") == (1048576,)
    assert parse_size("1024x512") == (1024, 512)
    assert parse_size("8,8,4") == (8, 8, 4)
    for bad in ["", "0", "-4", "1x2x3x4", "abc", "12.5"]:
        with pytest.raises(SpecError):
            parse_size(bad)


def test_parse_arg_forms():
    b = parse_arg("a=buffer:float4:1024")
    assert (b.name, b.kind, b.dtype, b.count, b.init) == ("a", "buffer", "float4", 1024, "random")
    assert parse_arg("out=buffer:int:10:zeros").init == "zeros"
    loc = parse_arg("tmp=local:float:256")
    assert (loc.kind, loc.count) == ("local", 256)
    s = parse_arg("n=1048576")
    assert (s.kind, s.value) == ("scalar", "1048576")


@pytest.mark.parametrize("bad", [
    "a", "=3", "a=buffer:float", "a=buffer:floaty:10", "a=buffer:float:ten", "a=buffer:float:10:purple",
    "a=local:float:10:zeros", "a=", "a=buffer:float:-1", "1a=3",
])
def test_parse_arg_rejects(bad):
    with pytest.raises(SpecError):
        parse_arg(bad)


def test_check_against_signature():
    params = kernel_signatures(SRC)["k"]
    ok = [parse_arg(x) for x in ["a=buffer:float4:64", "out=buffer:int:64", "tmp=local:float:8", "n=64", "s=0.5"]]
    check_against_signature(ok, params, "k")
    assert ok[3].dtype == "int"
    cases = {
        "no argument 'm'": ["m=3"],
        "given as a scalar": ["a=5"],
        "given as a buffer": ["n=buffer:int:4"],
        "given as a local": ["out=local:int:4"],
        "given as float": ["a=buffer:float:64"],
        "given twice": ["n=1", "n=2"],
        "not an integer": ["n=2.5"],
    }
    for msg, specs in cases.items():
        with pytest.raises(SpecError, match=msg):
            check_against_signature([parse_arg(s) for s in specs], params, "k")
