// argument types from a typedef and from a macro chosen by the configuration
#define real float
typedef real real_arg;
#if VW == 2
  #define realV float2
#elif VW == 4
  #define realV float4
#else
  #define realV float
#endif

extern "C" __global__ void scale(realV *x, const real_arg alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
#if VW == 1
        x[i] = alpha * x[i];
#else
        x[i].x = alpha * x[i].x;
#endif
    }
}
