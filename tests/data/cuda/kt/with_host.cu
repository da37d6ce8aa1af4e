#include <cstdio>

__global__ void halve(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.5f * x[i];
}

// host code in the same file: launches the kernel through the runtime API
extern "C" float run_halve(float *h, int n) {
    float *d;
    cudaStream_t s;
    cudaStreamCreate(&s);
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "%s\n", cudaGetErrorString(cudaGetLastError()));
        return -1.0f;
    }
    cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s);
    dim3 grid((n + 255) / 256), threads(256);
    halve<<<grid, threads, 0, s>>>(d, n);
    cudaDeviceSynchronize();
    cudaFree(d);
    return 0.0f;
}
