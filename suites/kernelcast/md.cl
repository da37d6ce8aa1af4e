// kernelcast suite: Lennard-Jones forces over a neighbour list.
// Written for the kernelcast benchmark suite (not part of any training corpus).

/* One atom per work-item. The neighbour list is stored neighbour-major (entry k of atom i at
   k * atoms + i) so that neighbouring work-items read adjacent words. lj_a = 48 eps sigma^12,
   lj_b = 24 eps sigma^6; pairs beyond sqrt(cut_sq) are skipped. */
__kernel void kc_md_lj_forces(__global const float4 *restrict where, __global const int *restrict nbr_list,
                              __global float4 *restrict accel, const int atoms, const int nbrs_per_atom,
                              const float cut_sq, const float lj_a, const float lj_b)
{
    const int me = (int)get_global_id(0);
    if (me >= atoms)
        return;
    const float4 here = where[me];
    float fx = 0.0f, fy = 0.0f, fz = 0.0f;
    for (int k = 0; k < nbrs_per_atom; k++) {
        const float4 there = where[nbr_list[k * atoms + me]];
        const float dx = here.x - there.x;
        const float dy = here.y - there.y;
        const float dz = here.z - there.z;
        const float rsq = dx * dx + dy * dy + dz * dz;
        if (rsq < cut_sq) {
            const float inv_r2 = 1.0f / rsq;
            const float inv_r6 = inv_r2 * inv_r2 * inv_r2;
            const float scalar_f = inv_r2 * inv_r6 * (lj_a * inv_r6 - lj_b);
            fx += dx * scalar_f;
            fy += dy * scalar_f;
            fz += dz * scalar_f;
        }
    }
    accel[me] = (float4)(fx, fy, fz, 0.0f);
}
