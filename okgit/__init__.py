"""okgit: a git-native optimizer for GPU kernels."""

__version__ = "0.1.0"
