__kernel void vadd(__global const float* restrict a, __global const float* restrict b, __global float* c, int n) {
    int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
#define TILE 16
__kernel void matmul(__global const float* A, __global const float* B, __global float* C, int n) {
    __local float As[TILE][TILE];
    __local float Bs[TILE][TILE];
    int tx = get_local_id(0), ty = get_local_id(1);
    int row = get_group_id(1) * TILE + ty, col = get_group_id(0) * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; t++) {
        As[ty][tx] = A[row * n + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TILE; k++) acc += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    C[row * n + col] = acc;
}
__kernel void reduce(__global const int* in, __global int* out, int n) {
    __local int s[BS];
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * BS + get_local_id(0);
    s[tid] = i < n ? in[i] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = BS / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) atomic_add(out, s[0]);
}
