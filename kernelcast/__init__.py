"""kernelcast: GPU kernel performance/energy datasets, analytical and learned models, benchmarks."""

__version__ = "0.1.0"
