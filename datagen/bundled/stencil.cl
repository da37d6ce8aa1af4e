// 1D, 2D and 3D stencil kernels (3-, 5-, 7-, 9-point, Jacobi, wave) written for kernelcast.

#ifndef ST_BLOCK_X
#define ST_BLOCK_X 16
#endif
#ifndef ST_BLOCK_Y
#define ST_BLOCK_Y 16
#endif

__kernel void st_1d_3pt(__global const float *in, __global float *out,
                        const float w0, const float w1, const int n)
{
    int i = get_global_id(0);
    if (i >= 1 && i < n - 1)
        out[i] = w1 * in[i - 1] + w0 * in[i] + w1 * in[i + 1];
}

__kernel void st_1d_5pt(__global const float *restrict in, __global float *restrict out,
                        const int n)
{
    int i = get_global_id(0);
    if (i >= 2 && i < n - 2)
        out[i] = (-in[i - 2] + 16.0f * in[i - 1] - 30.0f * in[i]
                  + 16.0f * in[i + 1] - in[i + 2]) * (1.0f / 12.0f);
}

/* 3-point stencil staging a tile plus halo in local memory (tile = local size + 2) */
__kernel void st_1d_3pt_local(__global const float *in, __global float *out,
                              __local float *tile, const int n)
{
    int gid = get_global_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    tile[lid + 1] = (gid < n) ? in[gid] : 0.0f;
    if (lid == 0)
        tile[0] = (gid > 0 && gid - 1 < n) ? in[gid - 1] : 0.0f;
    if (lid == lsz - 1)
        tile[lsz + 1] = (gid + 1 < n) ? in[gid + 1] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (gid > 0 && gid < n - 1)
        out[gid] = (tile[lid] + tile[lid + 1] + tile[lid + 2]) * (1.0f / 3.0f);
}

__kernel void st_2d_5pt(__global const float *in, __global float *out,
                        const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x > 0 && y > 0 && x < width - 1 && y < height - 1) {
        int c = y * width + x;
        out[c] = 0.2f * (in[c] + in[c - 1] + in[c + 1] + in[c - width] + in[c + width]);
    }
}

__kernel void st_2d_9pt(__global const float *in, __global float *out,
                        const int width, const int height)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < 1 || y < 1 || x >= width - 1 || y >= height - 1)
        return;
    float acc = 0.0f;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
            acc += in[(y + dy) * width + (x + dx)];
    out[y * width + x] = acc * (1.0f / 9.0f);
}

__kernel void st_2d_jacobi_step(__global const float *u, __global const float *rhs,
                                __global float *u_new, const float h2,
                                const int nx, const int ny)
{
    int i = get_global_id(0);
    int j = get_global_id(1);
    if (i > 0 && j > 0 && i < nx - 1 && j < ny - 1) {
        int k = j * nx + i;
        u_new[k] = 0.25f * (u[k - 1] + u[k + 1] + u[k - nx] + u[k + nx] - h2 * rhs[k]);
    }
}

/* 5-point Laplacian using a (BLOCK+2)^2 local tile with halo */
__kernel void st_2d_laplace_tiled(__global const float *in, __global float *out,
                                  const int width, const int height)
{
    __local float tile[ST_BLOCK_Y + 2][ST_BLOCK_X + 2];
    int lx = get_local_id(0), ly = get_local_id(1);
    int gx = get_global_id(0), gy = get_global_id(1);
    int bx = get_group_id(0) * ST_BLOCK_X - 1;
    int by = get_group_id(1) * ST_BLOCK_Y - 1;
    for (int ty = ly; ty < ST_BLOCK_Y + 2; ty += ST_BLOCK_Y) {
        for (int tx = lx; tx < ST_BLOCK_X + 2; tx += ST_BLOCK_X) {
            int sx = clamp(bx + tx, 0, width - 1);
            int sy = clamp(by + ty, 0, height - 1);
            tile[ty][tx] = in[sy * width + sx];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (gx < width && gy < height) {
        float c = tile[ly + 1][lx + 1];
        out[gy * width + gx] = tile[ly][lx + 1] + tile[ly + 2][lx + 1]
                             + tile[ly + 1][lx] + tile[ly + 1][lx + 2] - 4.0f * c;
    }
}

__kernel void st_2d_wave_step(__global const float *u_prev, __global const float *u_cur,
                              __global float *u_next, const float c2,
                              const int nx, const int ny)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= nx || y >= ny)
        return;
    int k = y * nx + x;
    if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
        u_next[k] = 0.0f;
        return;
    }
    float lap = u_cur[k - 1] + u_cur[k + 1] + u_cur[k - nx] + u_cur[k + nx] - 4.0f * u_cur[k];
    u_next[k] = 2.0f * u_cur[k] - u_prev[k] + c2 * lap;
}

__kernel void st_3d_7pt(__global const float *in, __global float *out,
                        const int nx, const int ny, const int nz)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    int z = get_global_id(2);
    if (x < 1 || y < 1 || z < 1 || x >= nx - 1 || y >= ny - 1 || z >= nz - 1)
        return;
    int plane = nx * ny;
    int c = z * plane + y * nx + x;
    out[c] = -6.0f * in[c] + in[c - 1] + in[c + 1] + in[c - nx] + in[c + nx]
             + in[c - plane] + in[c + plane];
}

/* 2D grid, each work-item marches along z keeping a register pipeline */
__kernel void st_3d_7pt_zmarch(__global const float *in, __global float *out,
                               const float alpha, const float beta,
                               const int nx, const int ny, const int nz)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < 1 || y < 1 || x >= nx - 1 || y >= ny - 1)
        return;
    int plane = nx * ny;
    int base = y * nx + x;
    float below = in[base];
    float cur = in[plane + base];
    for (int z = 1; z < nz - 1; ++z) {
        int c = z * plane + base;
        float above = in[c + plane];
        out[c] = alpha * cur + beta * (in[c - 1] + in[c + 1] + in[c - nx] + in[c + nx]
                                       + below + above);
        below = cur;
        cur = above;
    }
}

__kernel void st_3d_heat_27pt(__global const float *in, __global float *out,
                              const float wc, const float wn,
                              const int nx, const int ny, const int nz)
{
    int x = get_global_id(0);
    int y = get_global_id(1);
    int z = get_global_id(2);
    if (x < 1 || y < 1 || z < 1 || x >= nx - 1 || y >= ny - 1 || z >= nz - 1)
        return;
    float acc = 0.0f;
    for (int dz = -1; dz <= 1; ++dz)
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx)
                acc += in[((z + dz) * ny + (y + dy)) * nx + (x + dx)];
    int c = (z * ny + y) * nx + x;
    out[c] = wc * in[c] + wn * (acc - in[c]);
}
