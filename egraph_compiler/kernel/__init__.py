"""The kernel contract: programs of kernels over flat buffers, what every backend consumes."""
