// Data-partitioning kernels whose loop trip count is a scalar argument written for kernelcast.

/* each work-item processes k consecutive elements */
__kernel void pa_blocked_scale(__global const float *in, __global float *out,
                               const float s, const int k, const int n)
{
    int start = get_global_id(0) * k;
    for (int j = 0; j < k; ++j) {
        int idx = start + j;
        if (idx < n)
            out[idx] = in[idx] * s;
    }
}

/* grid-stride loop: element i, i + G, i + 2G, ... */
__kernel void pa_grid_stride_saxpy(__global const float *x, __global float *y,
                                   const float a, const int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        y[i] = a * x[i] + y[i];
}

/* each item handles k elements strided by the global size, no tail check inside (host pads) */
__kernel void pa_strided_k_add(__global const int *a, __global const int *b,
                               __global int *c, const int k)
{
    int gid = get_global_id(0);
    int gsz = get_global_size(0);
    for (int j = 0; j < k; ++j) {
        int idx = gid + j * gsz;
        c[idx] = a[idx] + b[idx];
    }
}

/* block sums: each work-item sums its own chunk of chunk elements */
__kernel void pa_chunk_sum(__global const float *in, __global float *chunk_sums,
                           const int chunk, const int n)
{
    int g = get_global_id(0);
    int start = g * chunk;
    if (start >= n)
        return;
    int end = min(start + chunk, n);
    float s = 0.0f;
    for (int j = start; j < end; ++j)
        s += in[j];
    chunk_sums[g] = s;
}

/* Horner polynomial evaluation, degree is a scalar */
__kernel void pa_horner_poly(__global const float *x, __global const float *coef,
                             __global float *y, const int degree, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = x[i];
        float acc = coef[degree];
        for (int d = degree - 1; d >= 0; --d)
            acc = mad(acc, v, coef[d]);
        y[i] = acc;
    }
}

/* moving average over a window of w samples */
__kernel void pa_moving_average(__global const float *in, __global float *out,
                                const int w, const int n)
{
    int i = get_global_id(0);
    if (i + w <= n) {
        float s = 0.0f;
        for (int j = 0; j < w; ++j)
            s += in[i + j];
        out[i] = s / (float)w;
    }
}

/* compute-bound kernel: arithmetic intensity set by the iteration count */
__kernel void pa_flops_loop(__global float *data, const float a, const float b,
                            const int iters)
{
    int i = get_global_id(0);
    float x = data[i];
    float y = x * 0.5f;
    for (int k = 0; k < iters; ++k) {
        x = mad(x, a, b);
        y = mad(y, b, a);
        x = mad(x, y, a);
        y = mad(y, x, b);
    }
    data[i] = x + y;
}

/* each work-item processes k float4 vectors (vectorized blocked partitioning) */
__kernel void pa_blocked_float4_mad(__global const float4 *a, __global const float4 *b,
                                    __global float4 *c, const int k, const int n4)
{
    int base = get_global_id(0) * k;
    for (int j = 0; j < k && base + j < n4; ++j)
        c[base + j] = mad(a[base + j], b[base + j], c[base + j]);
}

/* repeated memory sweeps: each work-item re-reads the same element reps times */
__kernel void pa_repeat_reads(__global const float *in, __global float *out,
                              const int reps, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float acc = 0.0f;
        for (int r = 0; r < reps; ++r)
            acc += in[(i + r * 64) % n];
        out[i] = acc;
    }
}

/* 2D partitioning: each work-item processes a rows_per_item x 1 strip of a matrix */
__kernel void pa_strip_rows(__global const float *in, __global float *out,
                            const int rows_per_item, const int rows, const int cols)
{
    int c = get_global_id(0);
    int r0 = get_global_id(1) * rows_per_item;
    if (c >= cols)
        return;
    for (int r = r0; r < r0 + rows_per_item && r < rows; ++r)
        out[r * cols + c] = 2.0f * in[r * cols + c] + 1.0f;
}
