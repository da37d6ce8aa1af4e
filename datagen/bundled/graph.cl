// Graph traversal kernels (BFS frontier expansion, label propagation, PageRank) written for kernelcast.

/* BFS with frontier mask: expand every vertex in the current frontier */
__kernel void gr_bfs_expand_mask(__global const int *row_offsets, __global const int *edges,
                                 __global char *frontier, __global char *next_frontier,
                                 __global char *visited, __global int *levels,
                                 const int num_vertices)
{
    int v = get_global_id(0);
    if (v < num_vertices && frontier[v]) {
        frontier[v] = 0;
        int lvl = levels[v] + 1;
        for (int e = row_offsets[v]; e < row_offsets[v + 1]; ++e) {
            int u = edges[e];
            if (!visited[u]) {
                levels[u] = lvl;
                next_frontier[u] = 1;
            }
        }
    }
}

/* second BFS phase: promote next frontier, set the "not done" flag */
__kernel void gr_bfs_update_mask(__global char *frontier, __global char *next_frontier,
                                 __global char *visited, __global int *not_done,
                                 const int num_vertices)
{
    int v = get_global_id(0);
    if (v < num_vertices && next_frontier[v]) {
        frontier[v] = 1;
        visited[v] = 1;
        next_frontier[v] = 0;
        *not_done = 1;
    }
}

/* level-synchronous BFS: a vertex is in the frontier when its level equals the current one */
__kernel void gr_bfs_level_sync(__global const int *row_offsets, __global const int *edges,
                                __global int *levels, __global int *changed,
                                const int cur_level, const int num_vertices)
{
    int v = get_global_id(0);
    if (v >= num_vertices || levels[v] != cur_level)
        return;
    for (int e = row_offsets[v]; e < row_offsets[v + 1]; ++e) {
        int u = edges[e];
        if (levels[u] < 0) {
            levels[u] = cur_level + 1;
            *changed = 1;
        }
    }
}

/* queue-based BFS: frontier is a compact vertex list, next queue built with atomics */
__kernel void gr_bfs_queue(__global const int *row_offsets, __global const int *edges,
                           __global const int *queue_in, __global int *queue_out,
                           __global int *queue_out_len, __global int *levels,
                           const int queue_len, const int cur_level)
{
    int t = get_global_id(0);
    if (t >= queue_len)
        return;
    int v = queue_in[t];
    for (int e = row_offsets[v]; e < row_offsets[v + 1]; ++e) {
        int u = edges[e];
        if (atomic_cmpxchg(&levels[u], -1, cur_level + 1) == -1) {
            int slot = atomic_inc(queue_out_len);
            queue_out[slot] = u;
        }
    }
}

/* connected components by min-label propagation */
__kernel void gr_cc_label_prop(__global const int *row_offsets, __global const int *edges,
                               __global int *labels, __global int *changed,
                               const int num_vertices)
{
    int v = get_global_id(0);
    if (v < num_vertices) {
        int my = labels[v];
        int best = my;
        for (int e = row_offsets[v]; e < row_offsets[v + 1]; ++e)
            best = min(best, labels[edges[e]]);
        if (best < my) {
            atomic_min(&labels[v], best);
            *changed = 1;
        }
    }
}

/* PageRank pull step over the transposed graph (in-edges) */
__kernel void gr_pagerank_pull(__global const int *in_offsets, __global const int *in_edges,
                               __global const int *out_degree, __global const float *rank,
                               __global float *rank_next, const float damping,
                               const int num_vertices)
{
    int v = get_global_id(0);
    if (v < num_vertices) {
        float sum = 0.0f;
        for (int e = in_offsets[v]; e < in_offsets[v + 1]; ++e) {
            int u = in_edges[e];
            int d = out_degree[u];
            if (d > 0)
                sum += rank[u] / (float)d;
        }
        rank_next[v] = (1.0f - damping) / (float)num_vertices + damping * sum;
    }
}

/* Bellman-Ford style SSSP relaxation with integer weights */
__kernel void gr_sssp_relax(__global const int *row_offsets, __global const int *edges,
                            __global const int *weights, __global int *dist,
                            __global int *changed, const int num_vertices)
{
    int v = get_global_id(0);
    if (v >= num_vertices)
        return;
    int dv = dist[v];
    if (dv == INT_MAX)
        return;
    for (int e = row_offsets[v]; e < row_offsets[v + 1]; ++e) {
        int nd = dv + weights[e];
        int u = edges[e];
        if (nd < dist[u]) {
            atomic_min(&dist[u], nd);
            *changed = 1;
        }
    }
}
