"""Predictors of kernel time and energy: static features, analytical, learned and blended models."""
