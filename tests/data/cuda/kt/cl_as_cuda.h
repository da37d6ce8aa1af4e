// maps OpenCL C spellings onto CUDA so that an OpenCL kernel compiles with nvcc
#define __kernel __global__
#define __global
#define __local __shared__
#define barrier(x) __syncthreads()
__device__ int get_local_id(int d) { return d == 0 ? threadIdx.x : threadIdx.y; }
__device__ int get_group_id(int d) { return d == 0 ? blockIdx.x : blockIdx.y; }
__device__ int get_global_id(int d) {
    return d == 0 ? blockIdx.x * blockDim.x + threadIdx.x : blockIdx.y * blockDim.y + threadIdx.y;
}
typedef struct { float s0; float s1; float s2; float s3; float s4; float s5; float s6; float s7; } float8;
