// Sorting network kernels (bitonic, odd-even) and radix-sort digit counting written for kernelcast.

/* one bitonic compare-exchange pass over the whole array; launch with n/2 work-items.
   stage = log2 of the bitonic sequence length being merged, pass = sub-step within it */
__kernel void so_bitonic_step(__global uint *keys, const uint stage, const uint pass,
                              const uint ascending)
{
    uint t = get_global_id(0);
    uint half_span = 1u << (stage - pass);
    uint lo = ((t >> (stage - pass)) << (stage - pass + 1u)) | (t & (half_span - 1u));
    uint hi = lo + half_span;
    bool flip = ((t >> stage) & 1u) != 0u;
    bool want_up = (ascending != 0u) != flip;
    uint a = keys[lo];
    uint b = keys[hi];
    if ((a > b) == want_up) {
        keys[lo] = b;
        keys[hi] = a;
    }
}

/* bitonic step with xor partner indexing over key/value pairs; launch with n work-items */
__kernel void so_bitonic_step_kv(__global float *keys, __global int *vals,
                                 const int j, const int k, const int n)
{
    int i = get_global_id(0);
    int ixj = i ^ j;
    if (i >= n || ixj <= i || ixj >= n)
        return;
    float ki = keys[i], kj = keys[ixj];
    bool up = (i & k) == 0;
    if ((up && ki > kj) || (!up && ki < kj)) {
        keys[i] = kj;
        keys[ixj] = ki;
        int t = vals[i];
        vals[i] = vals[ixj];
        vals[ixj] = t;
    }
}

/* full bitonic sort of one work-group's chunk in local memory (2 elements per item) */
__kernel void so_bitonic_local(__global int *data, __local int *buf)
{
    int lid = get_local_id(0);
    int m = 2 * get_local_size(0);
    int base = get_group_id(0) * m;
    buf[lid] = data[base + lid];
    buf[lid + m / 2] = data[base + lid + m / 2];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int size = 2; size <= m; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            int pos = 2 * lid - (lid & (stride - 1));
            bool asc = ((pos & size) == 0) || size == m;
            int a = buf[pos], b = buf[pos + stride];
            if ((a > b) == asc) {
                buf[pos] = b;
                buf[pos + stride] = a;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    data[base + lid] = buf[lid];
    data[base + lid + m / 2] = buf[lid + m / 2];
}

/* odd-even transposition sort: one phase (phase parity picks the pairs) */
__kernel void so_odd_even_phase(__global float *data, const int phase, const int n)
{
    int i = 2 * get_global_id(0) + (phase & 1);
    if (i + 1 < n) {
        float a = data[i], b = data[i + 1];
        if (a > b) {
            data[i] = b;
            data[i + 1] = a;
        }
    }
}

/* radix sort: per-group digit histogram of a 4-bit digit using local atomics */
__kernel void so_radix_digit_count(__global const uint *keys, __global uint *group_counts,
                                   const int shift, const int n)
{
    __local uint counts[16];
    int lid = get_local_id(0);
    if (lid < 16)
        counts[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int gid = get_global_id(0);
    if (gid < n)
        atomic_inc(&counts[(keys[gid] >> shift) & 0xFu]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 16)
        group_counts[lid * get_num_groups(0) + get_group_id(0)] = counts[lid];
}

/* rank sort: each key counts how many keys are smaller (O(n^2), small arrays) */
__kernel void so_rank_scatter(__global const float *in, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float v = in[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) {
        float w = in[j];
        rank += (w < v) || (w == v && j < i);
    }
    out[rank] = v;
}
