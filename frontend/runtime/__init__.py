"""The CUDA runtime of kiln: the driver, loaded modules and launches."""
