"""The validity race check, for real on the device: the concurrent configuration runs
(``concurrent_gsize`` recorded) and a race-free kernel whose every work-item does a read-modify-write
loop of its own element passes it, with the outputs of the small check unchanged.

Whether a racy kernel (a non-atomic read-modify-write of one global by every work-item) shows its
race depends on work-groups actually overlapping; on this 2-core PoCL device shared with other jobs
they rarely do, so no test asserts the detection (it would pass or fail by the machine's load)."""

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
