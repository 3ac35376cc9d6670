"""okgit's kernel compiler: a reference op captured as a graph of primitives, cut into fusion
groups, each group lowered by a template kind into Triton kernels, rendered into an op file.

capture (trace -> translate -> aten, builder; binding) -> graph -> fusion -> kinds (with
kernelcode, template) -> opfile. The templates proposer (okgit.search.proposers.templates)
drives it.
"""
