// Application kernels (option pricing, stream compaction, RNG, Monte Carlo, softmax, SGD) written for kernelcast.

inline float ap_norm_cdf(float x)
{
    return 0.5f * erfc(-x * 0.70710678f);
}

__kernel void ap_black_scholes(__global const float *spot, __global const float *strike,
                               __global const float *years, __global float *call,
                               __global float *put, const float rate, const float vol,
                               const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float S = spot[i], K = strike[i], T = fmax(years[i], 1e-4f);
    float sqT = sqrt(T);
    float d1 = (log(fmax(S, 1e-6f) / fmax(K, 1e-6f)) + (rate + 0.5f * vol * vol) * T)
               / (vol * sqT);
    float d2 = d1 - vol * sqT;
    float disc = exp(-rate * T);
    call[i] = S * ap_norm_cdf(d1) - K * disc * ap_norm_cdf(d2);
    put[i] = K * disc * ap_norm_cdf(-d2) - S * ap_norm_cdf(-d1);
}

/* binomial-tree pricing: one option per work-item, steps is a scalar */
__kernel void ap_binomial_option(__global const float *spot, __global const float *strike,
                                 __global float *price,
                                 const float rate, const float vol, const float T,
                                 const int steps)
{
    int i = get_global_id(0);
    float dt = T / steps;
    float u = exp(vol * sqrt(dt));
    float d = 1.0f / u;
    float p = (exp(rate * dt) - d) / (u - d);
    float disc = exp(-rate * dt);
    float S = spot[i], K = strike[i];
    /* closed-form sum over terminal nodes (no per-node storage) */
    float acc = 0.0f;
    float logc = 0.0f;
    for (int k = 0; k <= steps; ++k) {
        if (k > 0)
            logc += log((float)(steps - k + 1)) - log((float)k);
        float ST = S * pown(u, k) * pown(d, steps - k);
        float payoff = fmax(ST - K, 0.0f);
        acc += exp(logc + k * log(p) + (steps - k) * log(1.0f - p)) * payoff;
    }
    price[i] = acc * pown(disc, steps);
}

/* stream compaction step 1: predicate flags */
__kernel void ap_flag_positive(__global const float *in, __global uint *flags, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        flags[i] = in[i] > 0.0f ? 1u : 0u;
}

/* stream compaction step 2: scatter kept elements to exclusive-scan positions */
__kernel void ap_compact_scatter(__global const float *in, __global const uint *flags,
                                 __global const uint *positions, __global float *out,
                                 const int n)
{
    int i = get_global_id(0);
    if (i < n && flags[i])
        out[positions[i]] = in[i];
}

/* single-kernel compaction with a global atomic counter (order not preserved) */
__kernel void ap_compact_atomic(__global const int *in, __global int *out,
                                __global int *count, const int keep_mod, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        int v = in[i];
        if (v % keep_mod == 0) {
            int slot = atomic_inc(count);
            out[slot] = v;
        }
    }
}

/* work-group compaction: local counter then one global atomic per group */
__kernel void ap_compact_local(__global const float *in, __global float *out,
                               __global int *global_count, const float threshold, const int n)
{
    __local int lcount;
    __local int gbase;
    int i = get_global_id(0);
    if (get_local_id(0) == 0)
        lcount = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    float v = (i < n) ? in[i] : 0.0f;
    int keep = (i < n) && (v >= threshold);
    int my_slot = keep ? atomic_inc(&lcount) : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        gbase = atomic_add(global_count, lcount);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (keep)
        out[gbase + my_slot] = v;
}

/* xorshift32 random numbers, k per work-item, seed state kept per item */
__kernel void ap_xorshift_fill(__global uint *state, __global float *out, const int k)
{
    int gid = get_global_id(0);
    uint s = state[gid] | 1u;
    for (int j = 0; j < k; ++j) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        out[gid * k + j] = (float)s * (1.0f / 4294967296.0f);
    }
    state[gid] = s;
}

/* Monte Carlo estimate of pi: LCG per work-item, samples is a scalar, local reduction */
__kernel void ap_monte_carlo_pi(__global const uint *seeds, __global uint *hits_per_group,
                                __local uint *lhits, const int samples)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    uint s = seeds[gid] + (uint)gid * 747796405u + 1u;
    uint hits = 0;
    for (int k = 0; k < samples; ++k) {
        s = s * 1664525u + 1013904223u;
        float x = (s >> 8) * (1.0f / 16777216.0f);
        s = s * 1664525u + 1013904223u;
        float y = (s >> 8) * (1.0f / 16777216.0f);
        hits += (x * x + y * y <= 1.0f);
    }
    lhits[lid] = hits;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = get_local_size(0) / 2; st > 0; st >>= 1) {
        if (lid < st)
            lhits[lid] += lhits[lid + st];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        hits_per_group[get_group_id(0)] = lhits[0];
}

/* row-wise softmax, one work-item per row */
__kernel void ap_softmax_rows(__global const float *logits, __global float *probs,
                              const int rows, const int cols)
{
    int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *row = logits + r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c)
        m = fmax(m, row[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c)
        s += exp(row[c] - m);
    float inv = 1.0f / s;
    for (int c = 0; c < cols; ++c)
        probs[r * cols + c] = exp(row[c] - m) * inv;
}

/* layer normalization, one work-group per row with local reductions */
__kernel void ap_layernorm_group(__global const float *x, __global float *y,
                                 __global const float *gamma, __global const float *beta,
                                 __local float *red, const int cols, const float eps)
{
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    __global const float *xr = x + row * cols;
    float s = 0.0f;
    for (int c = lid; c < cols; c += lsz)
        s += xr[c];
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = lsz / 2; st > 0; st >>= 1) {
        if (lid < st)
            red[lid] += red[lid + st];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float mean = red[0] / cols;
    barrier(CLK_LOCAL_MEM_FENCE);
    float v = 0.0f;
    for (int c = lid; c < cols; c += lsz) {
        float d = xr[c] - mean;
        v += d * d;
    }
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = lsz / 2; st > 0; st >>= 1) {
        if (lid < st)
            red[lid] += red[lid + st];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv_std = rsqrt(red[0] / cols + eps);
    for (int c = lid; c < cols; c += lsz)
        y[row * cols + c] = (xr[c] - mean) * inv_std * gamma[c] + beta[c];
}

/* SGD with momentum parameter update */
__kernel void ap_sgd_momentum(__global float *weights, __global const float *grad,
                              __global float *velocity, const float lr, const float momentum,
                              const float weight_decay, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float g = grad[i] + weight_decay * weights[i];
        float v = momentum * velocity[i] + g;
        velocity[i] = v;
        weights[i] -= lr * v;
    }
}

/* Adam optimizer update */
__kernel void ap_adam_update(__global float *w, __global const float *g, __global float *m,
                             __global float *v, const float lr, const float beta1,
                             const float beta2, const float eps, const int step, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / (1.0f - pown(beta1, step));
    float vhat = vi / (1.0f - pown(beta2, step));
    w[i] -= lr * mhat / (sqrt(vhat) + eps);
}

/* per-sample cross-entropy loss from probabilities and integer labels */
__kernel void ap_cross_entropy(__global const float *probs, __global const int *labels,
                               __global float *loss, const int nclasses, const int nsamples)
{
    int s = get_global_id(0);
    if (s < nsamples) {
        int lbl = clamp(labels[s], 0, nclasses - 1);
        loss[s] = -log(fmax(probs[s * nclasses + lbl], 1e-12f));
    }
}
