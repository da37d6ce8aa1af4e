// kernelcast suite: reductions and the two passes of a blocked scan.
// Written for the kernelcast benchmark suite (not part of any training corpus).
//
// All three kernels run with a FIXED number of work-groups while the input length grows,
// so the global size does not follow the problem size (the hard case of LLMPerf IV-C).

#ifndef WG
#define WG 256
#endif

/* Sums `length` values into one partial per work-group.
   Each work-item first folds a grid-strided slice of the input in registers, then the
   work-group combines its WG values with a halving tree in __local memory. */
__kernel void kc_grid_sum(__global const float *restrict values, __global float *restrict group_sums,
                          __local float *stage, const uint length)
{
    const uint lane = (uint)get_local_id(0);
    const uint stride = (uint)get_global_size(0);
    float folded = 0.0f;
    for (uint at = (uint)get_global_id(0); at < length; at += stride)
        folded += values[at];
    stage[lane] = folded;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_width = (uint)get_local_size(0) >> 1; half_width > 0; half_width >>= 1) {
        if (lane < half_width)
            stage[lane] = stage[lane] + stage[lane + half_width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0)
        group_sums[get_group_id(0)] = stage[0];
}

/* The extent of the contiguous chunk of [0, length) that work-group `grp` of `groups` owns;
   chunks are a whole number of WG-wide tiles. */
static inline uint2 kc_chunk_of(uint grp, uint groups, uint length)
{
    uint tiles = (length + WG - 1) / WG;
    uint tiles_per_group = (tiles + groups - 1) / groups;
    uint first = min(grp * tiles_per_group * WG, length);
    uint last = min(first + tiles_per_group * WG, length);
    return (uint2)(first, last);
}

/* Scan pass 1: the total of each work-group's contiguous chunk. */
__kernel void kc_chunk_totals(__global const float *restrict values, __global float *restrict chunk_totals,
                              __local float *stage, const uint length)
{
    const uint lane = (uint)get_local_id(0);
    const uint2 span = kc_chunk_of((uint)get_group_id(0), (uint)get_num_groups(0), length);
    float folded = 0.0f;
    for (uint at = span.x + lane; at < span.y; at += WG)
        folded += values[at];
    stage[lane] = folded;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_width = WG >> 1; half_width > 0; half_width >>= 1) {
        if (lane < half_width)
            stage[lane] += stage[lane + half_width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0)
        chunk_totals[get_group_id(0)] = stage[0];
}

/* Scan pass 3: inclusive scan of each chunk, tile by tile, starting from the chunk's carry-in
   (the exclusive prefix of the chunk totals). Each tile is scanned in __local memory with a
   ping-pong Hillis-Steele sweep; the last element carries into the next tile. */
__kernel void kc_chunk_scan(__global const float *restrict values, __global float *restrict prefix,
                            __global const float *restrict carry_in, __local float *ping,
                            __local float *pong, const uint length)
{
    const uint lane = (uint)get_local_id(0);
    const uint2 span = kc_chunk_of((uint)get_group_id(0), (uint)get_num_groups(0), length);
    float carry = carry_in[get_group_id(0)];
    for (uint base = span.x; base < span.y; base += WG) {
        const uint at = base + lane;
        __local float *src = ping;
        __local float *dst = pong;
        src[lane] = at < span.y ? values[at] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint reach = 1; reach < WG; reach <<= 1) {
            dst[lane] = lane >= reach ? src[lane] + src[lane - reach] : src[lane];
            barrier(CLK_LOCAL_MEM_FENCE);
            __local float *swap = src;
            src = dst;
            dst = swap;
        }
        if (at < span.y)
            prefix[at] = carry + src[lane];
        carry += src[WG - 1];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
