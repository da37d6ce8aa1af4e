#include <mma.h>
using namespace nvcuda;

__global__ void tile(const float *a, float *c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}
