"""kernel-factory: convolution-family GPU kernels generated from templates, tuned on your GPU."""

__version__ = "0.1.0"
