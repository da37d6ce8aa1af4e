"""Benchmarks: suite manifests, measurement and model comparison (kernelcast bench), and scripts."""
