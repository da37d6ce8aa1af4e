#include "stencil_params.h"

// filled by the host before the launch (constant-memory argument)
__constant__ float weights[TAPS];

extern "C" {
__global__ void stencil(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
#pragma unroll unroll_taps
    for (int k = 0; k < TAPS; k++) {
        acc += weights[k] * in[i + k];
    }
    out[i] = acc;
}
}
