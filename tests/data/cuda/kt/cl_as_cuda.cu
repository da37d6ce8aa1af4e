#include "cl_as_cuda.h"
#if VW == 8
  typedef float8 floatV;
#else
  typedef float floatV;
#endif

__kernel void blocksum(__global const floatV *restrict_in, __global float *out) {
    __local float part[64];
    int l = get_local_id(0);
#if VW == 8
    floatV v = restrict_in[get_global_id(0)];
    part[l] = v.s0 + v.s1 + v.s2 + v.s3 + v.s4 + v.s5 + v.s6 + v.s7;
#else
    part[l] = restrict_in[get_global_id(0)];
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l == 0) {
        float s = 0.0f;
        for (int k = 0; k < 64; k++) s += part[k];
        out[get_group_id(0)] = s;
    }
}
