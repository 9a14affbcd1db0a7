"""Model lifecycle: the model manager, loading and unloading versions, their states, warm-up and where an instance's calls run."""
