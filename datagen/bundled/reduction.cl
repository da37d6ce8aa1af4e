// Work-group reductions (sum, max, min, dot; tree and sequential addressing) written for kernelcast.

/* interleaved (tree) addressing with modulo test: divergent */
__kernel void rd_sum_interleaved(__global const float *in, __global float *partial,
                                 __local float *red_buf, const int n)
{
    unsigned int lid = get_local_id(0);
    unsigned int gid = get_global_id(0);
    unsigned int group_size = get_local_size(0);
    red_buf[lid] = (gid < n) ? in[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 1; s < group_size; s *= 2) {
        if ((lid % (2 * s)) == 0)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

/* interleaved addressing with strided index instead of modulo */
__kernel void rd_sum_strided_index(__global const float *in, __global float *partial,
                                   __local float *red_buf, const int n)
{
    unsigned int lid = get_local_id(0);
    unsigned int gid = get_global_id(0);
    unsigned int lsz = get_local_size(0);
    red_buf[lid] = (gid < n) ? in[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 1; s < lsz; s <<= 1) {
        unsigned int idx = 2 * s * lid;
        if (idx + s < lsz)
            red_buf[idx] += red_buf[idx + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

/* sequential addressing, first add during global load (two elements per item) */
__kernel void rd_sum_sequential(__global const float *in, __global float *partial,
                                __local float *red_buf, const int n)
{
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    int i = get_group_id(0) * (lsz * 2) + lid;
    float v = (i < n) ? in[i] : 0.0f;
    if (i + lsz < n)
        v += in[i + lsz];
    red_buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsz / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

/* each work-item first accumulates elems_per_item elements in a grid-strided loop */
__kernel void rd_sum_multi_elem(__global const float *in, __global float *partial,
                                __local float *red_buf, const int n, const int elems_per_item)
{
    int lid = get_local_id(0);
    int gsz = get_global_size(0);
    int gid = get_global_id(0);
    float acc = 0.0f;
    for (int k = 0; k < elems_per_item; ++k) {
        int idx = gid + k * gsz;
        if (idx < n)
            acc += in[idx];
    }
    red_buf[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

__kernel void rd_max_f32(__global const float *in, __global float *partial,
                         __local float *red_buf, const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    red_buf[lid] = (gid < n) ? in[gid] : -INFINITY;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] = fmax(red_buf[lid], red_buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

__kernel void rd_min_i32(__global const int *in, __global int *partial,
                         __local int *red_buf, const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    red_buf[lid] = (gid < n) ? in[gid] : INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] = min(red_buf[lid], red_buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

__kernel void rd_dot_product(__global const float *a, __global const float *b,
                             __global float *partial, __local float *red_buf, const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    red_buf[lid] = (gid < n) ? a[gid] * b[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

__kernel void rd_sum_float4(__global const float4 *in, __global float *partial,
                            __local float4 *red_buf, const int n4)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    red_buf[lid] = (gid < n4) ? in[gid] : (float4)(0.0f);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        float4 v = red_buf[0];
        partial[get_group_id(0)] = v.x + v.y + v.z + v.w;
    }
}

__kernel void rd_sum_squares_i32(__global const int *in, __global long *partial,
                                 __local long *red_buf, const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    long v = (gid < n) ? (long)in[gid] : 0;
    red_buf[lid] = v * v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

/* argmax: value and index carried together */
__kernel void rd_argmax(__global const float *in, __global float *best_val,
                        __global int *best_idx, __local float *svals, __local int *sidx,
                        const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    svals[lid] = (gid < n) ? in[gid] : -INFINITY;
    sidx[lid] = gid;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s && svals[lid + s] > svals[lid]) {
            svals[lid] = svals[lid + s];
            sidx[lid] = sidx[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        best_val[get_group_id(0)] = svals[0];
        best_idx[get_group_id(0)] = sidx[0];
    }
}

/* single work-group finishes the reduction of the per-group partial sums */
__kernel void rd_final_pass(__global const float *partial, __global float *result,
                            __local float *red_buf, const int num_partials)
{
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float acc = 0.0f;
    for (int i = lid; i < num_partials; i += lsz)
        acc += partial[i];
    red_buf[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsz / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && get_group_id(0) == 0)
        result[0] = red_buf[0];
}

/* min and max in one pass using float2 local storage */
__kernel void rd_minmax_pair(__global const float *in, __global float2 *partial,
                             __local float2 *red_buf, const int n)
{
    int lid = get_local_id(0);
    int gid = get_global_id(0);
    float v = (gid < n) ? in[gid] : 0.0f;
    red_buf[lid] = (gid < n) ? (float2)(v, v) : (float2)(INFINITY, -INFINITY);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) {
            float2 a = red_buf[lid], b = red_buf[lid + s];
            red_buf[lid] = (float2)(fmin(a.x, b.x), fmax(a.y, b.y));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = red_buf[0];
}

/* per-row reduction of a matrix: one work-group per row */
__kernel void rd_row_sums(__global const float *mat, __global float *row_sum,
                          __local float *red_buf, const int cols)
{
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float acc = 0.0f;
    for (int c = lid; c < cols; c += lsz)
        acc += mat[row * cols + c];
    red_buf[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsz / 2; s > 0; s >>= 1) {
        if (lid < s)
            red_buf[lid] += red_buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        row_sum[row] = red_buf[0];
}
