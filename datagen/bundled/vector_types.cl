// Vector-type kernels (float4, int4, float2, vload4/vstore4) written for kernelcast.

__kernel void vt_add_float4(__global const float4 *a, __global const float4 *b,
                            __global float4 *c, const int n4)
{
    int i = get_global_id(0);
    if (i < n4)
        c[i] = a[i] + b[i];
}

__kernel void vt_mad_float4(__global const float4 *a, __global const float4 *b,
                            __global float4 *c, const float s)
{
    int i = get_global_id(0);
    c[i] = mad(a[i], (float4)(s), b[i]);
}

__kernel void vt_vload4_scale(__global const float *in, __global float *out,
                              const float scale, const int n4)
{
    int i = get_global_id(0);
    if (i < n4) {
        float4 v = vload4(i, in);
        vstore4(v * scale, i, out);
    }
}

/* misaligned vector load: vload4 from an element offset */
__kernel void vt_vload4_offset_sum(__global const float *in, __global float *out,
                                   const int offset, const int n4)
{
    int i = get_global_id(0);
    if (i < n4) {
        float4 v = vload4(0, in + offset + 4 * i);
        out[i] = v.x + v.y + v.z + v.w;
    }
}

__kernel void vt_int4_bitops(__global const int4 *a, __global const int4 *b,
                             __global int4 *out, const int n4)
{
    int i = get_global_id(0);
    if (i < n4) {
        int4 x = a[i], y = b[i];
        out[i] = (x & y) | ((x ^ y) >> 1) + (int4)(1, 2, 3, 4);
    }
}

__kernel void vt_complex_mul_float2(__global const float2 *a, __global const float2 *b,
                                    __global float2 *c, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float2 x = a[i], y = b[i];
        c[i] = (float2)(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x);
    }
}

__kernel void vt_float2_magnitude(__global const float2 *in, __global float *mag, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        mag[i] = length(in[i]);
}

__kernel void vt_dot_float4(__global const float4 *a, __global const float4 *b,
                            __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = dot(a[i], b[i]);
}

__kernel void vt_convert_int4_float4(__global const int4 *in, __global float4 *out,
                                     const float scale, const int n4)
{
    int i = get_global_id(0);
    if (i < n4)
        out[i] = convert_float4(in[i]) * scale;
}

__kernel void vt_float8_poly(__global const float8 *in, __global float8 *out, const int n8)
{
    int i = get_global_id(0);
    if (i < n8) {
        float8 x = in[i];
        out[i] = ((x * 0.5f + 1.0f) * x - 2.0f) * x + 0.25f;
    }
}

__kernel void vt_swizzle_shuffle(__global const float4 *in, __global float4 *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float4 v = in[i];
        out[i] = v.wzyx + v.yxwz * 0.5f;
    }
}

__kernel void vt_cross_normalize(__global const float4 *a, __global const float4 *b,
                                 __global float4 *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float4 c = cross(a[i], b[i]);
        out[i] = c * rsqrt(dot(c, c) + 1e-12f);
    }
}
