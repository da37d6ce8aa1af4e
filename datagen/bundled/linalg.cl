// Dense matrix-vector, matrix-matrix, transpose and 2D matrix kernels written for kernelcast.

#ifndef LA_TILE
#define LA_TILE 16
#endif
#ifndef LA_TDIM
#define LA_TDIM 16
#endif

__kernel void la_matvec_row(__global const float *A, __global const float *x,
                            __global float *y, const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c)
            acc += A[r * cols + c] * x[c];
        y[r] = acc;
    }
}

/* y = A^T x with A row-major: each item walks down a column (coalesced across items) */
__kernel void la_matvec_transposed(__global const float *A, __global const float *x,
                                   __global float *y, const int rows, const int cols)
{
    int c = get_global_id(0);
    if (c < cols) {
        float acc = 0.0f;
        for (int r = 0; r < rows; ++r)
            acc += A[r * cols + c] * x[r];
        y[c] = acc;
    }
}

/* x staged through local memory in chunks of the work-group size */
__kernel void la_matvec_local_x(__global const float *A, __global const float *x,
                                __global float *y, __local float *xs,
                                const int rows, const int cols)
{
    int r = get_global_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float acc = 0.0f;
    for (int base = 0; base < cols; base += lsz) {
        xs[lid] = (base + lid < cols) ? x[base + lid] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        int lim = min(lsz, cols - base);
        if (r < rows)
            for (int k = 0; k < lim; ++k)
                acc += A[r * cols + base + k] * xs[k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r < rows)
        y[r] = acc;
}

/* one work-group per row, tree reduction of the partial dot products */
__kernel void la_matvec_group_row(__global const float *A, __global const float *x,
                                  __global float *y, __local float *part, const int cols)
{
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float acc = 0.0f;
    for (int c = lid; c < cols; c += lsz)
        acc += A[row * cols + c] * x[c];
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsz / 2; s > 0; s >>= 1) {
        if (lid < s)
            part[lid] += part[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        y[row] = part[0];
}

__kernel void la_matmul_naive(__global const float *A, __global const float *B,
                              __global float *C, const int M, const int N, const int K)
{
    int col = get_global_id(0);
    int row = get_global_id(1);
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

__kernel void la_matmul_tiled(__global const float *A, __global const float *B,
                              __global float *C, const int M, const int N, const int K)
{
    __local float As[LA_TILE][LA_TILE];
    __local float Bs[LA_TILE][LA_TILE];
    int tx = get_local_id(0), ty = get_local_id(1);
    int col = get_group_id(0) * LA_TILE + tx;
    int row = get_group_id(1) * LA_TILE + ty;
    float acc = 0.0f;
    int ntiles = (K + LA_TILE - 1) / LA_TILE;
    for (int t = 0; t < ntiles; ++t) {
        int ak = t * LA_TILE + tx;
        int bk = t * LA_TILE + ty;
        As[ty][tx] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[ty][tx] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < LA_TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}

/* C = alpha*A*B + beta*C, each work-item computes a column pair (register blocking) */
__kernel void la_sgemm_2cols(__global const float *A, __global const float *B,
                             __global float *C, const int M, const int N, const int K,
                             const float alpha, const float beta)
{
    int col = 2 * get_global_id(0);
    int row = get_global_id(1);
    if (row >= M || col >= N)
        return;
    bool has2 = (col + 1) < N;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int k = 0; k < K; ++k) {
        float a = A[row * K + k];
        acc0 += a * B[k * N + col];
        if (has2)
            acc1 += a * B[k * N + col + 1];
    }
    C[row * N + col] = alpha * acc0 + beta * C[row * N + col];
    if (has2)
        C[row * N + col + 1] = alpha * acc1 + beta * C[row * N + col + 1];
}

/* C = A * B^T: both operands read along rows */
__kernel void la_matmul_bt(__global const float *A, __global const float *Bt,
                           __global float *C, const int M, const int N, const int K)
{
    int j = get_global_id(0);
    int i = get_global_id(1);
    if (i < M && j < N) {
        float4 acc = (float4)(0.0f);
        int k = 0;
        for (; k + 4 <= K; k += 4)
            acc += vload4(0, A + i * K + k) * vload4(0, Bt + j * K + k);
        float s = acc.x + acc.y + acc.z + acc.w;
        for (; k < K; ++k)
            s += A[i * K + k] * Bt[j * K + k];
        C[i * N + j] = s;
    }
}

__kernel void la_matmul_int(__global const int *A, __global const int *B, __global int *C,
                            const int n)
{
    int c = get_global_id(0);
    int r = get_global_id(1);
    if (r < n && c < n) {
        int acc = 0;
        for (int k = 0; k < n; ++k)
            acc += A[r * n + k] * B[k * n + c];
        C[r * n + c] = acc;
    }
}

__kernel void la_transpose_naive(__global const float *in, __global float *out,
                                 const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < width && y < height)
        out[x * height + y] = in[y * width + x];
}

/* tiled transpose through local memory, padded by one column to avoid bank conflicts */
__kernel void la_transpose_tiled(__global const float *in, __global float *out,
                                 const int width, const int height)
{
    __local float tile[LA_TDIM][LA_TDIM + 1];
    int bx = get_group_id(0) * LA_TDIM;
    int by = get_group_id(1) * LA_TDIM;
    int lx = get_local_id(0), ly = get_local_id(1);
    int x = bx + lx, y = by + ly;
    if (x < width && y < height)
        tile[ly][lx] = in[y * width + x];
    barrier(CLK_LOCAL_MEM_FENCE);
    x = by + lx;
    y = bx + ly;
    if (x < height && y < width)
        out[y * height + x] = tile[lx][ly];
}

__kernel void la_matrix_add_2d(__global const float *A, __global const float *B,
                               __global float *C, const int rows, const int cols)
{
    int c = get_global_id(0);
    int r = get_global_id(1);
    if (r < rows && c < cols)
        C[r * cols + c] = A[r * cols + c] + B[r * cols + c];
}

/* scale with a leading dimension (sub-matrix of a larger allocation) */
__kernel void la_matrix_scale_ld(__global float *A, const float s, const int rows,
                                 const int cols, const int ld)
{
    int c = get_global_id(0);
    int r = get_global_id(1);
    if (r < rows && c < cols)
        A[r * ld + c] *= s;
}

__kernel void la_outer_product(__global const float *u, __global const float *v,
                               __global float *M, const int rows, const int cols)
{
    int c = get_global_id(0);
    int r = get_global_id(1);
    if (r < rows && c < cols)
        M[r * cols + c] = u[r] * v[c];
}

/* batched small matmul: third dimension is the batch index */
__kernel void la_batched_matmul(__global const float *A, __global const float *B,
                                __global float *C, const int n)
{
    int c = get_global_id(0);
    int r = get_global_id(1);
    int b = get_global_id(2);
    if (r < n && c < n) {
        int off = b * n * n;
        float acc = 0.0f;
        for (int k = 0; k < n; ++k)
            acc += A[off + r * n + k] * B[off + k * n + c];
        C[off + r * n + c] = acc;
    }
}
