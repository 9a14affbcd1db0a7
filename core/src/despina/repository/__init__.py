"""Model repositories and configs: which model folders and versions exist, and how a config.pbtxt becomes the frozen config a backend and scheduler read."""
