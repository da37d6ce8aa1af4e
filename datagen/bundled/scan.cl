// Work-group prefix scans (Hillis-Steele, Blelloch) and block-sum uniform add written for kernelcast.

/* Hillis-Steele inclusive scan, ping-ponging between two halves of the local buffer
   (local buffer holds 2*lsize floats) */
__kernel void sc_inclusive_hillis_steele(__global const float *in, __global float *out,
                                         __local float *pingpong, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    __local float *src = pingpong;
    __local float *dst = pingpong + lsz;
    src[lid] = (gid < n) ? in[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int dist = 1; dist < lsz; dist <<= 1) {
        dst[lid] = (lid >= dist) ? src[lid] + src[lid - dist] : src[lid];
        barrier(CLK_LOCAL_MEM_FENCE);
        __local float *swap = src;
        src = dst;
        dst = swap;
    }
    if (gid < n)
        out[gid] = src[lid];
}

/* Hillis-Steele inclusive scan in place with a read/barrier/write sequence (int) */
__kernel void sc_inclusive_inplace_int(__global const int *in, __global int *out,
                                       __local int *tmp, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    int wg = get_local_size(0);
    tmp[lid] = (gid < n) ? in[gid] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int offset = 1; offset < wg; offset *= 2) {
        int add = (lid >= offset) ? tmp[lid - offset] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (gid < n)
        out[gid] = tmp[lid];
}

/* Blelloch work-efficient exclusive scan (up-sweep then down-sweep); each work-item owns
   two elements, the local buffer holds 2*lsize elements; block totals go to a second pass */
__kernel void sc_exclusive_blelloch(__global const float *in, __global float *out,
                                    __global float *block_sums, __local float *tree,
                                    const int n)
{
    int lid = get_local_id(0);
    int span = 2 * get_local_size(0);
    int first = get_group_id(0) * span;
    int lo = lid, hi = lid + span / 2;
    tree[lo] = (first + lo < n) ? in[first + lo] : 0.0f;
    tree[hi] = (first + hi < n) ? in[first + hi] : 0.0f;
    int step = 1;
    for (int active = span >> 1; active > 0; active >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < active) {
            int left = step * (2 * lid + 1) - 1;
            int right = left + step;
            tree[right] += tree[left];
        }
        step <<= 1;
    }
    if (lid == 0) {
        block_sums[get_group_id(0)] = tree[span - 1];
        tree[span - 1] = 0.0f;
    }
    for (int active = 1; active < span; active <<= 1) {
        step >>= 1;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < active) {
            int left = step * (2 * lid + 1) - 1;
            int right = left + step;
            float carry = tree[left];
            tree[left] = tree[right];
            tree[right] += carry;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (first + lo < n)
        out[first + lo] = tree[lo];
    if (first + hi < n)
        out[first + hi] = tree[hi];
}

/* exclusive scan of uint flags, one element per item, emitting per-group totals */
__kernel void sc_exclusive_uint_blocks(__global const uint *in, __global uint *out,
                                       __global uint *group_totals, __local uint *tmp,
                                       const uint n)
{
    uint gid = get_global_id(0);
    uint lid = get_local_id(0);
    uint lsz = get_local_size(0);
    uint orig = (gid < n) ? in[gid] : 0u;
    tmp[lid] = orig;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < lsz; off <<= 1) {
        uint add = (lid >= off) ? tmp[lid - off] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (gid < n)
        out[gid] = tmp[lid] - orig;
    if (lid == lsz - 1)
        group_totals[get_group_id(0)] = tmp[lid];
}

/* serial scan of the block sums by a single work-item (small array) */
__kernel void sc_block_sums_serial(__global float *block_sums, const int num_blocks)
{
    if (get_global_id(0) != 0)
        return;
    float running = 0.0f;
    for (int b = 0; b < num_blocks; ++b) {
        float v = block_sums[b];
        block_sums[b] = running;
        running += v;
    }
}

/* uniform add: every element of block b receives the scanned sum of blocks < b */
__kernel void sc_add_block_sums(__global float *data, __global const float *scanned_sums,
                                const int elems_per_block, const int n)
{
    __local float block_offset;
    if (get_local_id(0) == 0)
        block_offset = scanned_sums[get_group_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    int base = get_group_id(0) * elems_per_block;
    for (int k = get_local_id(0); k < elems_per_block; k += get_local_size(0))
        if (base + k < n)
            data[base + k] += block_offset;
}

__kernel void sc_add_block_sums_uint(__global uint *data, __global const uint *offsets,
                                     const uint n)
{
    uint gid = get_global_id(0);
    if (gid < n)
        data[gid] += offsets[get_group_id(0)];
}

/* each work-item scans k consecutive elements serially, then a local scan of item totals */
__kernel void sc_serial_then_local(__global const int *in, __global int *out,
                                   __local int *totals, const int k, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    int start = gid * k;
    int sum = 0;
    for (int j = 0; j < k; ++j)
        if (start + j < n)
            sum += in[start + j];
    int wg = get_local_size(0);
    totals[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < wg; off <<= 1) {
        int add = (lid >= off) ? totals[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        totals[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    int running = totals[lid] - sum;
    for (int j = 0; j < k; ++j) {
        if (start + j < n) {
            running += in[start + j];
            out[start + j] = running;
        }
    }
}

/* segmented inclusive scan: head flags restart the running sum */
__kernel void sc_segmented_inclusive(__global const float *in, __global const int *head_flag,
                                     __global float *out, __local float *vals,
                                     __local int *flags, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    vals[lid] = (gid < n) ? in[gid] : 0.0f;
    flags[lid] = (gid < n) ? head_flag[gid] : 1;
    if (lid == 0)
        flags[lid] = 1;
    int wg = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < wg; off <<= 1) {
        float v = vals[lid];
        int f = flags[lid];
        if (lid >= off && !f) {
            v += vals[lid - off];
            f = flags[lid - off];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        vals[lid] = v;
        flags[lid] = f;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (gid < n)
        out[gid] = vals[lid];
}
