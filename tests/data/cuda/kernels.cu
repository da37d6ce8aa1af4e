#ifndef BLOCK
#define BLOCK 128
#endif
__device__ float sq(float x) { return x * x; }

__global__ void vadd(const float* __restrict__ a, const float* __restrict__ b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

#define TILE 16
__global__ void matmul(const float* A, const float* B, float* C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; t++) {
        As[ty][tx] = A[row * n + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; k++) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * n + col] = acc;
}

template <typename T, int BS>
__global__ void reduce(const T* in, T* out, int n) {
    __shared__ T s[BS];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * BS + threadIdx.x;
    s[tid] = i < n ? in[i] : T(0);
    __syncthreads();
    for (int k = BS / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, s[0]);
}
template __global__ void reduce<float, BLOCK>(const float*, float*, int);
