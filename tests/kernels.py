"""Small OpenCL kernels that several tests measure on the device."""

TRIAD = """__kernel void triad(__global const float *a, __global const float *b, __global float *c,
                    const float s, const int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + s * b[i];
}"""


def poly(terms: int) -> str:
    """``poly``: Horner's rule with ``terms`` multiply-adds per work-item (compute-bound for many terms)."""
    return f"""__kernel void poly(__global const float *a, __global float *c, const int n) {{
  int i = get_global_id(0);
  if (i >= n) return;
  float x = a[i], y = 0.0f;
  for (int k = 0; k < {terms}; ++k) y = y * x + 1.0f;
  c[i] = y;
}}"""


#: a CSR sparse matrix-vector product: its row loop's trips are the matrix's row lengths (data)
CSR = """__kernel void spmv(__global const int* rowptr, __global const int* col, __global const float* val,
                   __global const float* x, __global float* y, int rows) {
  int r = get_global_id(0);
  if (r >= rows) return;
  float s = 0.0f;
  for (int j = rowptr[r]; j < rowptr[r + 1]; ++j)
    s += val[j] * x[col[j]];
  y[r] = s;
}"""
