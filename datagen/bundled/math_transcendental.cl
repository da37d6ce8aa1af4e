// Transcendental math kernels (sin, cos, exp, log, pow, sqrt, rsqrt, tanh...) written for kernelcast.

inline float kc_sigmoid(float x)
{
    return 1.0f / (1.0f + exp(-x));
}

__kernel void tm_sincos_rotate(__global const float2 *pts, __global const float *angle,
                               __global float2 *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float c;
        float s = sincos(angle[i], &c);
        float2 p = pts[i];
        out[i] = (float2)(c * p.x - s * p.y, s * p.x + c * p.y);
    }
}

__kernel void tm_sin_cos_sum(__global const float *x, __global float *y, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = x[i];
        y[i] = sin(v) * sin(v) + cos(2.0f * v);
    }
}

__kernel void tm_exp_decay(__global const float *t, __global float *out,
                           const float amplitude, const float rate, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = amplitude * exp(-rate * t[i]);
}

__kernel void tm_log_safe(__global const float *x, __global float *y, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = log(fmax(x[i], 1e-20f)) + log1p(fabs(x[i]));
}

__kernel void tm_pow_gamma(__global const float *x, __global float *y,
                           const float gamma, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        y[i] = pow(fabs(x[i]), gamma);
}

__kernel void tm_sqrt_hypot(__global const float *a, __global const float *b,
                            __global float *r, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        r[i] = sqrt(a[i] * a[i] + b[i] * b[i]);
}

__kernel void tm_rsqrt_normalize3(__global float *xs, __global float *ys, __global float *zs,
                                  const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float x = xs[i], y = ys[i], z = zs[i];
        float inv = rsqrt(x * x + y * y + z * z + 1e-12f);
        xs[i] = x * inv;
        ys[i] = y * inv;
        zs[i] = z * inv;
    }
}

__kernel void tm_tanh_act(__global const float *in, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = tanh(in[i]);
}

__kernel void tm_sigmoid_act(__global const float *in, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        out[i] = kc_sigmoid(in[i]);
}

__kernel void tm_gelu_approx(__global const float *in, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float x = in[i];
        float u = 0.7978845608f * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanh(u));
    }
}

__kernel void tm_native_sin_exp(__global const float *in, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = in[i];
        out[i] = native_sin(v) * native_exp(-v * v) + native_sqrt(fabs(v));
    }
}

__kernel void tm_cart_to_polar(__global const float *x, __global const float *y,
                               __global float *radius, __global float *theta, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float a = x[i], b = y[i];
        radius[i] = hypot(a, b);
        theta[i] = atan2(b, a);
    }
}

__kernel void tm_softplus_erf(__global const float *in, __global float *sp,
                              __global float *er, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float x = in[i];
        sp[i] = log1p(exp(-fabs(x))) + fmax(x, 0.0f);
        er[i] = erf(x);
    }
}
