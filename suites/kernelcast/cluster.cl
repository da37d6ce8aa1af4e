// kernelcast suite: distance kernels (k-means assignment, nearest-neighbour distances).
// Written for the kernelcast benchmark suite (not part of any training corpus).

#ifndef CLUSTERS
#define CLUSTERS 5
#endif

/* k-means assignment. Features are stored feature-major (feature f of point p at
   f * points + p); centres are [CLUSTERS][dims] in __constant memory. Each work-item keeps
   its CLUSTERS running distances in registers while it walks the features once. */
__kernel void kc_kmeans_label(__global const float *restrict feat, __constant float *centres,
                              __global int *restrict label, const int points, const int dims)
{
    const int p = (int)get_global_id(0);
    if (p >= points)
        return;
    float dist2[CLUSTERS];
    for (int c = 0; c < CLUSTERS; c++)
        dist2[c] = 0.0f;
    for (int f = 0; f < dims; f++) {
        const float x = feat[f * points + p];
        for (int c = 0; c < CLUSTERS; c++) {
            const float gap = x - centres[c * dims + f];
            dist2[c] = fma(gap, gap, dist2[c]);
        }
    }
    int winner = 0;
    for (int c = 1; c < CLUSTERS; c++)
        winner = dist2[c] < dist2[winner] ? c : winner;
    label[p] = winner;
}

/* Euclidean distance of every (latitude, longitude) record to one query location. */
__kernel void kc_nn_distance(__global const float2 *restrict records, __global float *restrict dist,
                             const float2 query, const int count)
{
    const int i = (int)get_global_id(0);
    if (i < count)
        dist[i] = distance(records[i], query);
}
