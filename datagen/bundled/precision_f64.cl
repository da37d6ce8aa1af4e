// Double-precision elementwise, math and small linear-algebra kernels written for kernelcast.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

__kernel void dp_add_f64(__global const double *a, __global const double *b,
                         __global double *c, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        c[i] = a[i] + b[i];
}

__kernel void dp_daxpy(__global const double *x, __global double *y,
                       const double alpha, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = fma(alpha, x[i], y[i]);
}

__kernel void dp_exp_log_f64(__global const double *in, __global double *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        double v = in[i];
        out[i] = exp(-v * v) + log(1.0 + fabs(v));
    }
}

__kernel void dp_sqrt_pow_f64(__global const double *in, __global double *out,
                              const double p, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = sqrt(fabs(in[i])) + pow(fabs(in[i]), p);
}

__kernel void dp_stencil3_f64(__global const double *in, __global double *out, const int n)
{
    int i = get_global_id(0);
    if (i > 0 && i < n - 1)
        out[i] = 0.25 * in[i - 1] + 0.5 * in[i] + 0.25 * in[i + 1];
}

__kernel void dp_gemv_row_f64(__global const double *A, __global const double *x,
                              __global double *y, const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r < rows) {
        double acc = 0.0;
        for (int c = 0; c < cols; ++c)
            acc += A[r * cols + c] * x[c];
        y[r] = acc;
    }
}

__kernel void dp_reduce_sum_f64(__global const double *in, __global double *partial,
                                __local double *scratch, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    scratch[lid] = (gid < n) ? in[gid] : 0.0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partial[get_group_id(0)] = scratch[0];
}
