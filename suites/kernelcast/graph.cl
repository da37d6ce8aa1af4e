// kernelcast suite: one frontier-expansion step of breadth-first search.
// Written for the kernelcast benchmark suite (not part of any training corpus).
//
// The step reads the current frontier and the visited mask (both left untouched, so repeated
// launches do identical work) and, for every unvisited out-neighbour of a frontier vertex,
// records its depth and marks it in to_visit. Folding to_visit into the frontier and the
// visited mask is a separate pass, not part of this benchmark.

#ifndef TEAM
#define TEAM 8        /* work-items sharing one vertex in kc_bfs_step_team */
#endif

/* One vertex per work-item. */
__kernel void kc_bfs_step_vertex(__global const int *restrict adj_start, __global const int *restrict adj_dst,
                                 __global const uchar *restrict in_frontier, __global const uchar *restrict seen,
                                 __global uchar *restrict to_visit, __global int *restrict depth,
                                 const int level, const int vertices)
{
    const int v = (int)get_global_id(0);
    if (v >= vertices || !in_frontier[v])
        return;
    const int stop = adj_start[v + 1];
    for (int e = adj_start[v]; e < stop; e++) {
        const int w = adj_dst[e];
        if (!seen[w]) {
            depth[w] = level + 1;
            to_visit[w] = 1;
        }
    }
}

/* TEAM adjacent work-items per vertex: the members split the vertex's adjacency list between
   them (the "virtual warp" layout). The global size is vertices * TEAM. */
__kernel void kc_bfs_step_team(__global const int *restrict adj_start, __global const int *restrict adj_dst,
                               __global const uchar *restrict in_frontier, __global const uchar *restrict seen,
                               __global uchar *restrict to_visit, __global int *restrict depth,
                               const int level, const int vertices)
{
    const int gid = (int)get_global_id(0);
    const int v = gid / TEAM;
    const int member = gid - v * TEAM;
    if (v >= vertices || !in_frontier[v])
        return;
    const int stop = adj_start[v + 1];
    for (int e = adj_start[v] + member; e < stop; e += TEAM) {
        const int w = adj_dst[e];
        if (!seen[w]) {
            depth[w] = level + 1;
            to_visit[w] = 1;
        }
    }
}
