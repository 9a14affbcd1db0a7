"""The wire between the server and a model's child process, used on both sides: message
framing, pb_utils requests and responses as messages, shared-memory and CUDA IPC tensors."""
