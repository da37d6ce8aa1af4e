"""Dataset generation: corpus, argument selection, launch-config sampling, dataset writing."""
