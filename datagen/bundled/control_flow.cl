// Branch-divergent and iteration-bounded kernels (Mandelbrot, Collatz, early exit) written for kernelcast.

/* work depends on gid % period: some lanes do much more arithmetic than others */
__kernel void cf_mod_divergent(__global const float *in, __global float *out,
                               const int period, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float v = in[i];
    int lane = i % period;
    if (lane == 0) {
        for (int k = 0; k < 32; ++k)
            v = v * 0.99f + sin(v);
    } else if (lane == 1) {
        v = sqrt(fabs(v)) + 1.0f;
    } else {
        v = v * 2.0f;
    }
    out[i] = v;
}

/* even/odd work-items take different code paths */
__kernel void cf_even_odd_paths(__global const int *a, __global int *out, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        if ((i & 1) == 0)
            out[i] = a[i] * a[i] + 7;
        else
            out[i] = (a[i] >> 2) - (a[i] & 3);
    }
}

/* data-dependent branch: sign of the input picks the formula */
__kernel void cf_data_branch(__global const float *x, __global float *y, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = x[i];
        if (v > 0.0f)
            y[i] = log(1.0f + v);
        else if (v < -1.0f)
            y[i] = -exp(v + 1.0f);
        else
            y[i] = v * v * 0.5f;
    }
}

/* early exit: entries below the threshold are skipped entirely */
__kernel void cf_threshold_early_exit(__global const float *in, __global float *out,
                                      const float threshold, const int iters, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float v = in[i];
    if (fabs(v) < threshold) {
        out[i] = 0.0f;
        return;
    }
    for (int k = 0; k < iters; ++k)
        v = native_divide(v + 1.0f, 1.0f + v * v);
    out[i] = v;
}

__kernel void cf_mandelbrot(__global int *iterations, const float x0, const float y0,
                            const float step, const int width, const int height,
                            const int max_iter)
{
    int px = get_global_id(0);
    int py = get_global_id(1);
    if (px >= width || py >= height)
        return;
    float cr = x0 + px * step;
    float ci = y0 + py * step;
    float zr = 0.0f, zi = 0.0f;
    int it = 0;
    while (it < max_iter && zr * zr + zi * zi <= 4.0f) {
        float t = zr * zr - zi * zi + cr;
        zi = 2.0f * zr * zi + ci;
        zr = t;
        ++it;
    }
    iterations[py * width + px] = it;
}

__kernel void cf_julia_smooth(__global float *out, const float cr, const float ci,
                              const float scale, const int width, const int height,
                              const int max_iter)
{
    int px = get_global_id(0);
    int py = get_global_id(1);
    if (px < width && py < height) {
        float2 z = (float2)((px - width * 0.5f) * scale, (py - height * 0.5f) * scale);
        int it;
        for (it = 0; it < max_iter; ++it) {
            if (dot(z, z) > 16.0f)
                break;
            z = (float2)(z.x * z.x - z.y * z.y + cr, 2.0f * z.x * z.y + ci);
        }
        float smooth = (it < max_iter) ? it + 1.0f - log2(log(length(z))) : (float)max_iter;
        out[py * width + px] = smooth;
    }
}

/* Collatz step counts: trip count depends on the data, capped by max_steps */
__kernel void cf_collatz_steps(__global const uint *start, __global uint *steps,
                               const uint max_steps, const uint n)
{
    uint i = get_global_id(0);
    if (i < n) {
        ulong x = start[i] + 1;
        uint s = 0;
        while (x != 1 && s < max_steps) {
            x = (x & 1) ? 3 * x + 1 : x >> 1;
            ++s;
        }
        steps[i] = s;
    }
}

/* per-element operation code selects the operation (switch) */
__kernel void cf_opcode_switch(__global const int *opcodes, __global const float *a,
                               __global const float *b, __global float *out, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float x = a[i], y = b[i];
    float r;
    switch (opcodes[i] & 3) {
    case 0: r = x + y; break;
    case 1: r = x * y; break;
    case 2: r = fmax(x, y); break;
    default: r = x - y; break;
    }
    out[i] = r;
}

/* trip count grows with (gid % spread): load imbalance within a work-group */
__kernel void cf_triangular_loop(__global const float *in, __global float *out,
                                 const int spread, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        int trips = (i % spread) + 1;
        float acc = 0.0f;
        for (int k = 0; k < trips; ++k)
            acc += in[(i + k) % n] * (float)(k + 1);
        out[i] = acc;
    }
}

/* piecewise polynomial: the segment index is computed from data */
__kernel void cf_piecewise_poly(__global const float *x, __global const float *coeffs,
                                __global float *y, const int nseg, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float v = clamp(x[i], 0.0f, 0.999999f);
        int seg = (int)(v * nseg);
        float t = v * nseg - seg;
        __global const float *c = coeffs + 4 * seg;
        y[i] = ((c[3] * t + c[2]) * t + c[1]) * t + c[0];
    }
}

/* bisection root-finding of x^3 + p x - q; iteration count depends on tolerance */
__kernel void cf_bisection_cubic(__global const float *p, __global const float *q,
                                 __global float *root, const float tol, const int max_iter,
                                 const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float pp = p[i], qq = q[i];
    float lo = -10.0f, hi = 10.0f;
    for (int it = 0; it < max_iter && (hi - lo) > tol; ++it) {
        float mid = 0.5f * (lo + hi);
        float f = mid * mid * mid + pp * mid - qq;
        if (f > 0.0f)
            hi = mid;
        else
            lo = mid;
    }
    root[i] = 0.5f * (lo + hi);
}
