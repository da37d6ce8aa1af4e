"""The validity race check, for real on the device: the concurrent configuration runs
(``concurrent_gsize`` recorded) and a race-free kernel whose every work-item does a read-modify-write
loop of its own element passes it, with the outputs of the small check unchanged.

Whether a racy kernel (a non-atomic read-modify-write of one global by every work-item) shows its
race depends on work-groups actually overlapping; on this 2-core PoCL device shared with other jobs
they rarely do, so no test asserts the detection (it would pass or fail by the machine's load).
How outputs are compared (an append through an atomic counter as a multiset) is checked on
recorded digests, since no run can be made to schedule its work-items in another order."""

from __future__ import annotations

from kernelcast.instrument.harness import Harness

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

OWN = """__kernel void own(__global int* acc, __global const int* x) {
  int g = get_global_id(0);
  for (int i = 0; i < 64; ++i) acc[g] = acc[g] + x[g];
}"""


def _config(n: int, lsize: int) -> LaunchConfig:
    return LaunchConfig((n,), (lsize,), [ArgBinding("acc", "buffer", "int", n, init="zeros"),
                                         ArgBinding("x", "buffer", "int", n, init="random")])


def test_race_free_kernel_passes_the_concurrent_check(harness: Harness) -> None:
    from kernelcast.datagen.validity import check_validity

    small, concurrent = _config(16, 8), _config(8 * 512, 8)
    plain = check_validity(harness, Kernel(OWN, "own"), small)
    assert plain.status == "ok" and plain.concurrent_gsize is None
    v = check_validity(harness, Kernel(OWN, "own"), small, concurrent=concurrent)
    assert v.status == "ok", v.reason
    assert v.concurrent_gsize == [4096] and v.nondeterministic is False and v.changed_outputs == ["acc"]


APPEND = """__kernel void append(__global const float* in, __global float* out, __global int* count) {
  int i = get_global_id(0);
  int s = atomic_inc(count);
  out[s] = in[i];
}"""
COPY = """__kernel void copy(__global const float* in, __global float* out, __global int* count) {
  int i = get_global_id(0);
  out[i] = in[i] + count[0];
}"""


class _Recorded:
    """A harness that answers each run with the next recorded output digests."""

    def __init__(self, runs: list[dict[str, str]]) -> None:
        self.runs = iter(runs)

    def run(self, kernel, config, policy, want_outputs=False):
        from kernelcast.schema import Measurement

        ordered, by_value = next(self.runs)["out"]
        out = {"sha256": ordered, "sorted_sha256": by_value, "changed": True, "output_candidate": True}
        return Measurement(kernel_id=kernel.id, kernel_name=kernel.name, device="recorded", gsize=config.gsize,
                           lsize=config.lsize, args=[], status="ok", outputs={"out": out})


def test_an_append_in_another_order_is_not_nondeterministic() -> None:
    from kernelcast.datagen.validity import check_validity

    cfg = LaunchConfig((16,), (8,), [ArgBinding("in", "buffer", "float", 16, init="random"),
                                     ArgBinding("out", "buffer", "float", 16, init="zeros"),
                                     ArgBinding("count", "buffer", "int", 1, init="zeros")])
    # runs A and B: same values, other order; run C (other inputs): other values
    permuted = [{"out": ("a", "s")}, {"out": ("b", "s")}, {"out": ("c", "t")}]
    v = check_validity(_Recorded(permuted), Kernel(APPEND, "append"), cfg)
    assert (v.status, v.nondeterministic, v.input_insensitive) == ("ok", False, False)
    # the same digests for a kernel that stores at its own index: the order is the output
    v = check_validity(_Recorded(permuted), Kernel(COPY, "copy"), cfg)
    assert v.status == "invalid_output" and v.nondeterministic is True
    # an append whose values differ between identical runs is nondeterministic
    changed = [{"out": ("a", "s")}, {"out": ("b", "u")}, {"out": ("c", "t")}]
    v = check_validity(_Recorded(changed), Kernel(APPEND, "append"), cfg)
    assert v.status == "invalid_output" and v.nondeterministic is True
    # an append whose values ignore the inputs is input-insensitive, whatever their order
    same = [{"out": ("a", "s")}, {"out": ("b", "s")}, {"out": ("c", "s")}]
    v = check_validity(_Recorded(same), Kernel(APPEND, "append"), cfg)
    assert v.status == "invalid_output" and v.input_insensitive is True
