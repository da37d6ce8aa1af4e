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
