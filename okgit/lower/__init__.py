"""okgit's kernel compiler: a reference op captured as a graph of primitives, cut into fusion
groups, each lowered by a template kind into Triton kernels, rendered into a complete op file.

capture (trace, translate, aten, builder, binding) -> graph -> fusion -> kernelcode.
"""
