// Histogram kernels with global and local-memory atomics written for kernelcast.

#ifndef HG_BINS
#define HG_BINS 256
#endif

__kernel void hg_global_inc_u8(__global const uchar *data, __global uint *hist, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        atomic_inc(&hist[data[i]]);
}

/* local privatized histogram, merged into the global one with atomic_add */
__kernel void hg_local_privatized(__global const uchar *data, __global uint *hist,
                                  const int n)
{
    __local uint lhist[HG_BINS];
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    for (int b = lid; b < HG_BINS; b += lsz)
        lhist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        atomic_add(&lhist[data[i]], 1u);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < HG_BINS; b += lsz) {
        uint c = lhist[b];
        if (c)
            atomic_add(&hist[b], c);
    }
}

/* local histogram written out as a per-group sub-histogram (no global atomics) */
__kernel void hg_sub_histograms(__global const uint *data, __global uint *sub_hist,
                                __local uint *lhist, const int n, const int nbins)
{
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    for (int b = lid; b < nbins; b += lsz)
        lhist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int gid = get_global_id(0);
    if (gid < n)
        atomic_inc(&lhist[data[gid] % nbins]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < nbins; b += lsz)
        sub_hist[get_group_id(0) * nbins + b] = lhist[b];
}

/* merge per-group sub-histograms: one work-item per bin */
__kernel void hg_merge_sub_histograms(__global const uint *sub_hist, __global uint *hist,
                                      const int num_groups, const int nbins)
{
    int b = get_global_id(0);
    if (b < nbins) {
        uint total = 0;
        for (int g = 0; g < num_groups; ++g)
            total += sub_hist[g * nbins + b];
        hist[b] = total;
    }
}

__kernel void hg_float_range(__global const float *values, __global int *hist,
                             const float lo, const float hi, const int nbins, const int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    float v = values[i];
    if (v < lo || v >= hi)
        return;
    int b = (int)((v - lo) / (hi - lo) * nbins);
    atomic_inc(&hist[min(b, nbins - 1)]);
}

__kernel void hg_rgb_channels(__global const uchar4 *pixels, __global uint *hist_r,
                              __global uint *hist_g, __global uint *hist_b, const int npix)
{
    int i = get_global_id(0);
    if (i < npix) {
        uchar4 p = pixels[i];
        atomic_inc(&hist_r[p.x]);
        atomic_inc(&hist_g[p.y]);
        atomic_inc(&hist_b[p.z]);
    }
}

/* each work-item bins k consecutive ints into a local histogram */
__kernel void hg_local_k_per_item(__global const int *keys, __global uint *hist,
                                  const int k, const int n)
{
    __local uint lhist[HG_BINS];
    int lid = get_local_id(0);
    for (int b = lid; b < HG_BINS; b += get_local_size(0))
        lhist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int start = get_global_id(0) * k;
    for (int j = 0; j < k; ++j) {
        int idx = start + j;
        if (idx < n)
            atomic_add(&lhist[keys[idx] & (HG_BINS - 1)], 1u);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < HG_BINS; b += get_local_size(0))
        atomic_add(&hist[b], lhist[b]);
}

__kernel void hg_count_above(__global const float *data, __global int *counter,
                             const float threshold, const int n)
{
    int i = get_global_id(0);
    if (i < n && data[i] > threshold)
        atomic_inc(counter);
}
