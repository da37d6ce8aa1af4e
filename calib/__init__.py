"""Device calibration: microbenchmarks that produce a device profile."""
