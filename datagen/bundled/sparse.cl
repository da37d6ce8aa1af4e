// Sparse matrix-vector kernels (CSR scalar/vector, ELLPACK, DIA, COO) written for kernelcast.

/* CSR, one row per work-item */
__kernel void sp_csr_scalar(__global const int *row_ptr, __global const int *col_idx,
                            __global const float *vals, __global const float *x,
                            __global float *y, const int num_rows)
{
    int row = get_global_id(0);
    if (row < num_rows) {
        float acc = 0.0f;
        int end = row_ptr[row + 1];
        for (int j = row_ptr[row]; j < end; ++j)
            acc += vals[j] * x[col_idx[j]];
        y[row] = acc;
    }
}

/* CSR, one row per work-group, local tree reduction */
__kernel void sp_csr_vector_group(__global const int *row_ptr, __global const int *col_idx,
                                  __global const float *vals, __global const float *x,
                                  __global float *y, __local float *partial,
                                  const int num_rows)
{
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float acc = 0.0f;
    if (row < num_rows) {
        int start = row_ptr[row], end = row_ptr[row + 1];
        for (int j = start + lid; j < end; j += lsz)
            acc += vals[j] * x[col_idx[j]];
    }
    partial[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsz / 2; s > 0; s >>= 1) {
        if (lid < s)
            partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && row < num_rows)
        y[row] = partial[0];
}

/* CSR, one row per "warp" of WARP_SZ work-items; several rows per work-group */
#ifndef SP_WARP
#define SP_WARP 32
#endif
__kernel void sp_csr_vector_warp(__global const int *row_ptr, __global const int *col_idx,
                                 __global const float *vals, __global const float *x,
                                 __global float *y, __local float *partial,
                                 const int num_rows)
{
    int lid = get_local_id(0);
    int lane = lid & (SP_WARP - 1);
    int row = get_global_id(0) / SP_WARP;
    float acc = 0.0f;
    if (row < num_rows) {
        int end = row_ptr[row + 1];
        for (int j = row_ptr[row] + lane; j < end; j += SP_WARP)
            acc += vals[j] * x[col_idx[j]];
    }
    partial[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = SP_WARP / 2; s > 0; s >>= 1) {
        if (lane < s)
            partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && row < num_rows)
        y[row] = partial[lid];
}

/* CSR, each work-item handles rows_per_item consecutive rows */
__kernel void sp_csr_multi_row(__global const int *row_ptr, __global const int *col_idx,
                               __global const float *vals, __global const float *x,
                               __global float *y, const int num_rows, const int rows_per_item)
{
    int first = get_global_id(0) * rows_per_item;
    for (int r = first; r < first + rows_per_item && r < num_rows; ++r) {
        float acc = 0.0f;
        for (int j = row_ptr[r]; j < row_ptr[r + 1]; ++j)
            acc += vals[j] * x[col_idx[j]];
        y[r] = acc;
    }
}

/* ELLPACK stored column-major (entry k of row r at k*num_rows + r), -1 marks padding */
__kernel void sp_ell_colmajor(__global const int *ell_cols, __global const float *ell_vals,
                              __global const float *x, __global float *y,
                              const int num_rows, const int max_nnz_row)
{
    int row = get_global_id(0);
    if (row < num_rows) {
        float acc = 0.0f;
        for (int k = 0; k < max_nnz_row; ++k) {
            int idx = k * num_rows + row;
            int c = ell_cols[idx];
            if (c >= 0)
                acc += ell_vals[idx] * x[c];
        }
        y[row] = acc;
    }
}

/* ELLPACK stored row-major with a per-row length array */
__kernel void sp_ell_rowmajor_len(__global const int *ell_cols, __global const float *ell_vals,
                                  __global const int *row_len, __global const float *x,
                                  __global float *y, const int num_rows, const int width)
{
    int row = get_global_id(0);
    if (row >= num_rows)
        return;
    int len = row_len[row];
    float acc = 0.0f;
    for (int k = 0; k < len; ++k)
        acc += ell_vals[row * width + k] * x[ell_cols[row * width + k]];
    y[row] = acc;
}

/* DIA format: offsets of each stored diagonal, data stored diagonal-major */
__kernel void sp_dia(__global const int *offsets, __global const float *data,
                     __global const float *x, __global float *y,
                     const int num_rows, const int num_cols, const int num_diags)
{
    int row = get_global_id(0);
    if (row < num_rows) {
        float acc = 0.0f;
        for (int d = 0; d < num_diags; ++d) {
            int col = row + offsets[d];
            if (col >= 0 && col < num_cols)
                acc += data[d * num_rows + row] * x[col];
        }
        y[row] = acc;
    }
}

/* COO with float accumulation through compare-and-swap on the bit pattern */
inline void sp_atomic_add_float(volatile __global float *addr, float v)
{
    union { unsigned int u; float f; } old_val, new_val;
    do {
        old_val.f = *addr;
        new_val.f = old_val.f + v;
    } while (atomic_cmpxchg((volatile __global unsigned int *)addr, old_val.u, new_val.u)
             != old_val.u);
}

__kernel void sp_coo_atomic(__global const int *rows, __global const int *cols,
                            __global const float *vals, __global const float *x,
                            __global float *y, const int nnz)
{
    int i = get_global_id(0);
    if (i < nnz)
        sp_atomic_add_float(&y[rows[i]], vals[i] * x[cols[i]]);
}
