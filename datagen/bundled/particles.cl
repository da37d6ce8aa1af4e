// N-body, Lennard-Jones and k-means distance kernels written for kernelcast.

#ifndef PT_TILE
#define PT_TILE 64
#endif

/* all-pairs gravitational acceleration, positions in float4 (w = mass) */
__kernel void pt_nbody_allpairs(__global const float4 *pos, __global float4 *acc,
                                const int nbodies, const float softening)
{
    int i = get_global_id(0);
    if (i >= nbodies)
        return;
    float4 pi = pos[i];
    float3 a = (float3)(0.0f);
    for (int j = 0; j < nbodies; ++j) {
        float4 pj = pos[j];
        float3 d = pj.xyz - pi.xyz;
        float r2 = dot(d, d) + softening;
        float inv = rsqrt(r2);
        a += d * (pj.w * inv * inv * inv);
    }
    acc[i] = (float4)(a, 0.0f);
}

/* tiled n-body: positions staged through local memory one tile at a time */
__kernel void pt_nbody_tiled(__global const float4 *pos, __global float4 *vel,
                             __local float4 *tile, const int nbodies,
                             const float dt, const float softening)
{
    int i = get_global_id(0);
    int lid = get_local_id(0);
    int lsz = get_local_size(0);
    float4 pi = (i < nbodies) ? pos[i] : (float4)(0.0f);
    float4 a = (float4)(0.0f);
    for (int base = 0; base < nbodies; base += lsz) {
        int j = base + lid;
        tile[lid] = (j < nbodies) ? pos[j] : (float4)(0.0f);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < lsz; ++k) {
            float4 d = tile[k] - pi;
            d.w = 0.0f;
            float r2 = d.x * d.x + d.y * d.y + d.z * d.z + softening;
            float inv = native_rsqrt(r2);
            a += d * (tile[k].w * inv * inv * inv);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < nbodies)
        vel[i] += a * dt;
}

__kernel void pt_integrate_leapfrog(__global float4 *pos, __global float4 *vel,
                                    __global const float4 *acc, const float dt,
                                    const int nbodies)
{
    int i = get_global_id(0);
    if (i < nbodies) {
        float4 v = vel[i] + acc[i] * dt;
        float4 p = pos[i];
        p.xyz += v.xyz * dt;
        vel[i] = v;
        pos[i] = p;
    }
}

/* Lennard-Jones force over a fixed-width neighbour list */
__kernel void pt_lj_neighbors(__global const float4 *pos, __global const int *neigh,
                              __global const int *neigh_count, __global float4 *force,
                              const int max_neigh, const float cutoff2,
                              const float eps, const float sigma6, const int natoms)
{
    int i = get_global_id(0);
    if (i >= natoms)
        return;
    float4 pi = pos[i];
    float4 f = (float4)(0.0f);
    int cnt = min(neigh_count[i], max_neigh);
    for (int k = 0; k < cnt; ++k) {
        int j = neigh[i * max_neigh + k];
        float4 d = pi - pos[j];
        float r2 = d.x * d.x + d.y * d.y + d.z * d.z;
        if (r2 < cutoff2 && r2 > 0.0f) {
            float ir2 = 1.0f / r2;
            float ir6 = ir2 * ir2 * ir2;
            float s6 = sigma6 * ir6;
            float fmag = 24.0f * eps * ir2 * s6 * (2.0f * s6 - 1.0f);
            f.xyz += d.xyz * fmag;
        }
    }
    force[i] = f;
}

/* Lennard-Jones energy and force over all atoms with a cutoff (neighbour list stored transposed) */
__kernel void pt_lj_transposed_list(__global const float4 *pos, __global const int *neigh_t,
                                    __global float4 *force, __global float *energy,
                                    const int max_neigh, const float cutoff2,
                                    const int natoms)
{
    int i = get_global_id(0);
    if (i < natoms) {
        float4 pi = pos[i];
        float3 f = (float3)(0.0f);
        float e = 0.0f;
        for (int k = 0; k < max_neigh; ++k) {
            int j = neigh_t[k * natoms + i];
            if (j < 0 || j == i)
                continue;
            float3 d = pi.xyz - pos[j].xyz;
            float r2 = dot(d, d);
            if (r2 < cutoff2) {
                float ir6 = 1.0f / (r2 * r2 * r2);
                e += 4.0f * ir6 * (ir6 - 1.0f);
                f += d * (24.0f * ir6 * (2.0f * ir6 - 1.0f) / r2);
            }
        }
        force[i] = (float4)(f, 0.0f);
        energy[i] = 0.5f * e;
    }
}

/* k-means assignment, points stored row-major [npoints][nfeatures] */
__kernel void pt_kmeans_assign(__global const float *points, __global const float *centroids,
                               __global int *membership, const int npoints,
                               const int nclusters, const int nfeatures)
{
    int p = get_global_id(0);
    if (p >= npoints)
        return;
    int best = 0;
    float best_d = FLT_MAX;
    for (int c = 0; c < nclusters; ++c) {
        float d = 0.0f;
        for (int f = 0; f < nfeatures; ++f) {
            float diff = points[p * nfeatures + f] - centroids[c * nfeatures + f];
            d += diff * diff;
        }
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    membership[p] = best;
}

/* k-means assignment with feature-major layout [nfeatures][npoints] (coalesced) */
__kernel void pt_kmeans_assign_soa(__global const float *features, __global const float *centroids,
                                   __global int *membership, __global float *min_dist,
                                   const int npoints, const int nclusters, const int nfeatures)
{
    int p = get_global_id(0);
    if (p < npoints) {
        int best = -1;
        float best_d = FLT_MAX;
        for (int c = 0; c < nclusters; ++c) {
            float d = 0.0f;
            for (int f = 0; f < nfeatures; ++f) {
                float diff = features[f * npoints + p] - centroids[c * nfeatures + f];
                d = mad(diff, diff, d);
            }
            if (d < best_d) {
                best_d = d;
                best = c;
            }
        }
        membership[p] = best;
        min_dist[p] = best_d;
    }
}

/* k-means: centroids cached in local memory (nclusters*nfeatures <= local buffer) */
__kernel void pt_kmeans_local_centroids(__global const float *points,
                                        __global const float *centroids,
                                        __global int *membership, __local float *lcent,
                                        const int npoints, const int nclusters,
                                        const int nfeatures)
{
    int lid = get_local_id(0);
    int total = nclusters * nfeatures;
    for (int k = lid; k < total; k += get_local_size(0))
        lcent[k] = centroids[k];
    barrier(CLK_LOCAL_MEM_FENCE);
    int p = get_global_id(0);
    if (p >= npoints)
        return;
    int best = 0;
    float best_d = FLT_MAX;
    for (int c = 0; c < nclusters; ++c) {
        float d = 0.0f;
        for (int f = 0; f < nfeatures; ++f) {
            float diff = points[p * nfeatures + f] - lcent[c * nfeatures + f];
            d += diff * diff;
        }
        best = (d < best_d) ? c : best;
        best_d = fmin(d, best_d);
    }
    membership[p] = best;
}

/* k-means update step: accumulate per-cluster counts with atomics */
__kernel void pt_kmeans_count(__global const int *membership, __global int *cluster_size,
                              const int npoints)
{
    int p = get_global_id(0);
    if (p < npoints)
        atomic_inc(&cluster_size[membership[p]]);
}
