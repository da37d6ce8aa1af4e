#include "hip/hip_runtime.h"

extern "C" __global__ __launch_bounds__(256) void saxpy(float *y, const float *x, float a, int n) {
    int i = hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
    if (i < n) y[i] = a * x[i] + y[i];
}
