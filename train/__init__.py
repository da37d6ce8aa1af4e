"""Training the learned model on a dataset."""
