// Offset, strided, gather and scatter memory-access kernels written for kernelcast.

__kernel void ma_copy_offset(__global const float *src, __global float *dst,
                             const int offset, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = src[i + offset];
}

__kernel void ma_strided_read(__global const float *src, __global float *dst,
                              const int stride, const int offset, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = src[i * stride + offset];
}

__kernel void ma_strided_write(__global const float *src, __global float *dst,
                               const int stride, const int offset, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i * stride + offset] = src[i];
}

__kernel void ma_strided_rw_int(__global const int *src, __global int *dst,
                                const int in_stride, const int out_stride, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i * out_stride] = src[i * in_stride] + 1;
}

/* array-of-structs field extraction: each record has rec_len floats */
__kernel void ma_aos_field_extract(__global const float *records, __global float *field,
                                   const int rec_len, const int field_idx, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        field[i] = records[i * rec_len + field_idx];
}

__kernel void ma_gather_f32(__global const float *src, __global const int *idx,
                            __global float *dst, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = src[idx[i]];
}

__kernel void ma_scatter_f32(__global const float *src, __global const int *idx,
                             __global float *dst, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[idx[i]] = src[i];
}

__kernel void ma_gather_float4(__global const float4 *src, __global const int *idx,
                               __global float4 *dst, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = src[idx[i]];
}

__kernel void ma_gather_two_level(__global const float *values, __global const int *outer,
                                  __global const int *inner, __global float *dst, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[i] = values[inner[outer[i]]];
}

__kernel void ma_scatter_add_atomic(__global const int *vals, __global const int *idx,
                                    __global int *bins, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        atomic_add(&bins[idx[i]], vals[i]);
}

__kernel void ma_gather_weighted_sum(__global const float *src, __global const int *idx,
                                     __global const float *weight, __global float *dst,
                                     const int fanin, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float acc = 0.0f;
    for (int k = 0; k < fanin; ++k)
        acc += weight[i * fanin + k] * src[idx[i * fanin + k]];
    dst[i] = acc;
}

/* row-major 2D array read column-wise: uncoalesced */
__kernel void ma_column_sum(__global const float *mat, __global float *colsum,
                            const int rows, const int cols)
{
    int c = get_global_id(0);
    if (c < cols) {
        float s = 0.0f;
        for (int r = 0; r < rows; ++r)
            s += mat[r * cols + c];
        colsum[c] = s;
    }
}

__kernel void ma_reverse_copy(__global const float *src, __global float *dst, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        dst[n - 1 - i] = src[i];
}

__kernel void ma_interleave_pairs(__global const float *re, __global const float *im,
                                  __global float *cplx, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        cplx[2 * i] = re[i];
        cplx[2 * i + 1] = im[i];
    }
}
