// kernelcast suite: sparse matrix-vector products y = A x.
// Written for the kernelcast benchmark suite (not part of any training corpus).

#ifndef LANES
#define LANES 16      /* work-items cooperating on one CSR row in kc_spmv_csr_lanes */
#endif

/* CSR, one matrix row per work-item. */
__kernel void kc_spmv_csr_rowwise(__global const float *restrict nz_values, __global const int *restrict nz_cols,
                                  __global const int *restrict row_start, __global const float *restrict vec,
                                  __global float *restrict out, const int rows)
{
    const int r = (int)get_global_id(0);
    if (r >= rows)
        return;
    const int stop = row_start[r + 1];
    float dot_acc = 0.0f;
    for (int slot = row_start[r]; slot < stop; slot++)
        dot_acc = fma(nz_values[slot], vec[nz_cols[slot]], dot_acc);
    out[r] = dot_acc;
}

/* CSR, one matrix row per team of LANES adjacent work-items: lanes walk the row with stride
   LANES, then each team folds its LANES partial dot products in __local memory. The global
   size is rows * LANES (rounded up to the work-group size). */
__kernel void kc_spmv_csr_lanes(__global const float *restrict nz_values, __global const int *restrict nz_cols,
                                __global const int *restrict row_start, __global const float *restrict vec,
                                __global float *restrict out, __local float *lane_acc, const int rows)
{
    const int local_id = (int)get_local_id(0);
    const int lane = local_id % LANES;
    const int team_base = local_id - lane;
    const int r = (int)(get_global_id(0) / LANES);
    float part = 0.0f;
    if (r < rows) {
        const int stop = row_start[r + 1];
        for (int slot = row_start[r] + lane; slot < stop; slot += LANES)
            part = fma(nz_values[slot], vec[nz_cols[slot]], part);
    }
    lane_acc[local_id] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = LANES / 2; width >= 1; width /= 2) {
        float other = lane < width ? lane_acc[team_base + lane + width] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        lane_acc[local_id] += other;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && r < rows)
        out[r] = lane_acc[team_base];
}

/* ELLPACK-R: slot k of row r sits at k * rows + r (column-major, padded to the widest row);
   row_len says how many slots of the row are real. */
__kernel void kc_spmv_ellr(__global const float *restrict ell_values, __global const int *restrict ell_cols,
                           __global const int *restrict row_len, __global const float *restrict vec,
                           __global float *restrict out, const int rows)
{
    const int r = (int)get_global_id(0);
    if (r >= rows)
        return;
    const int used = row_len[r];
    float dot_acc = 0.0f;
    int at = r;
    for (int k = 0; k < used; k++, at += rows)
        dot_acc = fma(ell_values[at], vec[ell_cols[at]], dot_acc);
    out[r] = dot_acc;
}
