"""Memory outside the Python heap: client-registered system and CUDA shared memory, the server's own shared memory, tensors on GPUs and the GPUs themselves."""
