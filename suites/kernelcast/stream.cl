// kernelcast suite: streaming kernels.
// Written for the kernelcast benchmark suite (not part of any training corpus).

/* a = b + s * c, one element per work-item; the tail guard allows a rounded-up global size */
__kernel void kc_stream_triad(__global const float *restrict lhs, __global const float *restrict rhs,
                              __global float *restrict dst, const float scale, const int length)
{
    const int k = (int)get_global_id(0);
    if (k >= length)
        return;
    dst[k] = fma(scale, rhs[k], lhs[k]);
}
