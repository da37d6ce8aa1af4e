// Image-processing kernels on plain buffers (uchar4 pixels, float planes) written for kernelcast.

__kernel void im_rgb_to_gray(__global const uchar4 *rgba, __global uchar *gray,
                             const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < width && y < height) {
        uchar4 p = rgba[y * width + x];
        float g = 0.299f * p.x + 0.587f * p.y + 0.114f * p.z;
        gray[y * width + x] = convert_uchar_sat(g);
    }
}

/* 1D launch over the pixel count */
__kernel void im_rgb_to_gray_linear(__global const uchar4 *rgba, __global float *gray,
                                    const int npix)
{
    int i = get_global_id(0);
    if (i < npix) {
        float4 p = convert_float4(rgba[i]);
        gray[i] = dot(p.xyz, (float3)(0.2126f, 0.7152f, 0.0722f)) * (1.0f / 255.0f);
    }
}

__kernel void im_box_blur_3x3(__global const float *src, __global float *dst,
                              const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    float s = 0.0f;
    for (int dy = -1; dy <= 1; ++dy) {
        int yy = clamp(y + dy, 0, height - 1);
        for (int dx = -1; dx <= 1; ++dx) {
            int xx = clamp(x + dx, 0, width - 1);
            s += src[yy * width + xx];
        }
    }
    dst[y * width + x] = s * (1.0f / 9.0f);
}

__kernel void im_gaussian_5x5(__global const float *src, __global float *dst,
                              const int width, const int height)
{
    const float w[5] = {1.0f / 16, 4.0f / 16, 6.0f / 16, 4.0f / 16, 1.0f / 16};
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < 2 || y < 2 || x >= width - 2 || y >= height - 2)
        return;
    float s = 0.0f;
    for (int j = 0; j < 5; ++j)
        for (int i = 0; i < 5; ++i)
            s += w[j] * w[i] * src[(y + j - 2) * width + (x + i - 2)];
    dst[y * width + x] = s;
}

/* box blur with a radius scalar on a multi-channel float4 image */
__kernel void im_box_blur_radius_f4(__global const float4 *src, __global float4 *dst,
                                    const int width, const int height, const int radius)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    float4 s = (float4)(0.0f);
    int cnt = 0;
    for (int yy = max(0, y - radius); yy <= min(height - 1, y + radius); ++yy)
        for (int xx = max(0, x - radius); xx <= min(width - 1, x + radius); ++xx) {
            s += src[yy * width + xx];
            ++cnt;
        }
    dst[y * width + x] = s / (float)cnt;
}

__kernel void im_sobel_magnitude(__global const float *src, __global float *mag,
                                 const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < 1 || y < 1 || x >= width - 1 || y >= height - 1)
        return;
    const int w = width;
    int c = y * w + x;
    float gx = -src[c - w - 1] + src[c - w + 1] - 2.0f * src[c - 1] + 2.0f * src[c + 1]
               - src[c + w - 1] + src[c + w + 1];
    float gy = -src[c - w - 1] - 2.0f * src[c - w] - src[c - w + 1]
               + src[c + w - 1] + 2.0f * src[c + w] + src[c + w + 1];
    mag[c] = sqrt(gx * gx + gy * gy);
}

__kernel void im_threshold_u8(__global const uchar *src, __global uchar *dst,
                              const int level, const int npix)
{
    int i = get_global_id(0);
    if (i < npix)
        dst[i] = (src[i] > level) ? 255 : 0;
}

__kernel void im_gamma_uchar4(__global uchar4 *pixels, const float inv_gamma, const int npix)
{
    int i = get_global_id(0);
    if (i < npix) {
        float4 p = convert_float4(pixels[i]) * (1.0f / 255.0f);
        p.xyz = pow(p.xyz, (float3)(inv_gamma));
        pixels[i] = convert_uchar4_sat(p * 255.0f);
    }
}

__kernel void im_bilinear_resize(__global const float *src, __global float *dst,
                                 const int src_w, const int src_h,
                                 const int dst_w, const int dst_h)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= dst_w || y >= dst_h)
        return;
    float fx = (x + 0.5f) * src_w / (float)dst_w - 0.5f;
    float fy = (y + 0.5f) * src_h / (float)dst_h - 0.5f;
    int x0 = clamp((int)floor(fx), 0, src_w - 1);
    int y0 = clamp((int)floor(fy), 0, src_h - 1);
    int x1 = min(x0 + 1, src_w - 1);
    int y1 = min(y0 + 1, src_h - 1);
    float ax = clamp(fx - x0, 0.0f, 1.0f);
    float ay = clamp(fy - y0, 0.0f, 1.0f);
    float top = mix(src[y0 * src_w + x0], src[y0 * src_w + x1], ax);
    float bot = mix(src[y1 * src_w + x0], src[y1 * src_w + x1], ax);
    dst[y * dst_w + x] = mix(top, bot, ay);
}

__kernel void im_flip_horizontal(__global const uchar4 *src, __global uchar4 *dst,
                                 const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < width && y < height)
        dst[y * width + (width - 1 - x)] = src[y * width + x];
}

__kernel void im_alpha_blend(__global const uchar4 *fg, __global const uchar4 *bg,
                             __global uchar4 *out, const int npix)
{
    int i = get_global_id(0);
    if (i < npix) {
        float4 f = convert_float4(fg[i]);
        float4 b = convert_float4(bg[i]);
        float a = f.w * (1.0f / 255.0f);
        float4 o = f * a + b * (1.0f - a);
        o.w = 255.0f;
        out[i] = convert_uchar4_sat_rte(o);
    }
}

/* 3x3 median filter with a small sorting network in registers */
inline void im_swap_sort(float *a, float *b)
{
    float lo = fmin(*a, *b);
    float hi = fmax(*a, *b);
    *a = lo;
    *b = hi;
}

__kernel void im_median_3x3(__global const float *src, __global float *dst,
                            const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < 1 || y < 1 || x >= width - 1 || y >= height - 1)
        return;
    float v[9];
    int k = 0;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
            v[k++] = src[(y + dy) * width + x + dx];
    for (int i = 0; i < 5; ++i)
        for (int j = i + 1; j < 9; ++j)
            im_swap_sort(&v[i], &v[j]);
    dst[y * width + x] = v[4];
}

/* planar RGB (three float planes) to YUV, vectorized along x by 4 */
__kernel void im_planar_rgb_to_yuv4(__global const float *r, __global const float *g,
                                    __global const float *b, __global float *yy,
                                    __global float *uu, __global float *vv, const int n4)
{
    int i = get_global_id(0);
    if (i >= n4)
        return;
    float4 R = vload4(i, r), G = vload4(i, g), B = vload4(i, b);
    float4 Y = 0.299f * R + 0.587f * G + 0.114f * B;
    vstore4(Y, i, yy);
    vstore4(0.492f * (B - Y), i, uu);
    vstore4(0.877f * (R - Y), i, vv);
}
