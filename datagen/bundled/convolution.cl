// 1D and 2D convolution kernels with filter arrays and filter-width scalars written for kernelcast.

#ifndef CV_MAX_FILTER
#define CV_MAX_FILTER 64
#endif

__kernel void cv_1d_naive(__global const float *in, __global const float *filter,
                          __global float *out, const int n, const int filter_width)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    int r = filter_width / 2;
    float acc = 0.0f;
    for (int k = 0; k < filter_width; ++k) {
        int j = i + k - r;
        if (j >= 0 && j < n)
            acc += in[j] * filter[k];
    }
    out[i] = acc;
}

/* valid-region convolution, no bounds handling needed inside the loop */
__kernel void cv_1d_valid(__global const float *restrict in, __constant float *filter,
                          __global float *restrict out, const int out_len, const int filter_width)
{
    int i = get_global_id(0);
    if (i < out_len) {
        float acc = 0.0f;
        for (int k = 0; k < filter_width; ++k)
            acc = mad(in[i + k], filter[k], acc);
        out[i] = acc;
    }
}

/* filter cached in local memory before use */
__kernel void cv_1d_local_filter(__global const float *in, __global const float *filter,
                                 __global float *out, __local float *lfilter,
                                 const int n, const int filter_width)
{
    int i = get_global_id(0);
    int lid = get_local_id(0);
    for (int k = lid; k < filter_width; k += get_local_size(0))
        lfilter[k] = filter[k];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n - filter_width + 1) {
        float acc = 0.0f;
        for (int k = 0; k < filter_width; ++k)
            acc += in[i + k] * lfilter[k];
        out[i] = acc;
    }
}

__kernel void cv_2d_naive(__global const float *img, __global const float *filter,
                          __global float *out, const int width, const int height,
                          const int filter_width)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    int r = filter_width / 2;
    float acc = 0.0f;
    for (int fy = 0; fy < filter_width; ++fy) {
        int sy = clamp(y + fy - r, 0, height - 1);
        for (int fx = 0; fx < filter_width; ++fx) {
            int sx = clamp(x + fx - r, 0, width - 1);
            acc += img[sy * width + sx] * filter[fy * filter_width + fx];
        }
    }
    out[y * width + x] = acc;
}

__kernel void cv_2d_constant_filter(__global const float *img, __constant float *filter,
                                    __global float *out, const int width, const int height,
                                    const int filter_width)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    int out_w = width - filter_width + 1;
    int out_h = height - filter_width + 1;
    if (x < out_w && y < out_h) {
        float acc = 0.0f;
        for (int fy = 0; fy < filter_width; ++fy)
            for (int fx = 0; fx < filter_width; ++fx)
                acc += img[(y + fy) * width + x + fx] * filter[fy * filter_width + fx];
        out[y * out_w + x] = acc;
    }
}

__kernel void cv_2d_separable_rows(__global const float *in, __global const float *taps,
                                   __global float *out, const int width, const int height,
                                   const int radius)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < width && y < height) {
        float acc = 0.0f;
        for (int k = -radius; k <= radius; ++k) {
            int sx = clamp(x + k, 0, width - 1);
            acc += in[y * width + sx] * taps[k + radius];
        }
        out[y * width + x] = acc;
    }
}

__kernel void cv_2d_separable_cols(__global const float *in, __global const float *taps,
                                   __global float *out, const int width, const int height,
                                   const int radius)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < width && y < height) {
        float acc = 0.0f;
        for (int k = -radius; k <= radius; ++k) {
            int sy = clamp(y + k, 0, height - 1);
            acc += in[sy * width + x] * taps[k + radius];
        }
        out[y * width + x] = acc;
    }
}

/* filter weights staged in a statically sized local array */
__kernel void cv_2d_local_weights(__global const float *img, __global const float *filter,
                                  __global float *out, const int width, const int height,
                                  const int filter_width)
{
    __local float wts[CV_MAX_FILTER * CV_MAX_FILTER];
    int nl = get_local_size(0) * get_local_size(1);
    int lid = get_local_id(1) * get_local_size(0) + get_local_id(0);
    int fw = min(filter_width, CV_MAX_FILTER);
    for (int k = lid; k < fw * fw; k += nl)
        wts[k] = filter[k];
    barrier(CLK_LOCAL_MEM_FENCE);
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    int r = fw / 2;
    float acc = 0.0f;
    for (int fy = 0; fy < fw; ++fy) {
        int sy = y + fy - r;
        if (sy < 0 || sy >= height)
            continue;
        for (int fx = 0; fx < fw; ++fx) {
            int sx = x + fx - r;
            if (sx >= 0 && sx < width)
                acc += img[sy * width + sx] * wts[fy * fw + fx];
        }
    }
    out[y * width + x] = acc;
}

/* multi-channel 1D convolution (e.g. a conv layer over a sequence) */
__kernel void cv_1d_multichannel(__global const float *in, __global const float *weights,
                                 __global float *out, const int length, const int in_ch,
                                 const int filter_width)
{
    int t = get_global_id(0);
    int oc = get_global_id(1);
    int out_len = length - filter_width + 1;
    if (t >= out_len)
        return;
    float acc = 0.0f;
    for (int c = 0; c < in_ch; ++c)
        for (int k = 0; k < filter_width; ++k)
            acc += in[c * length + t + k] * weights[(oc * in_ch + c) * filter_width + k];
    out[oc * out_len + t] = acc;
}
