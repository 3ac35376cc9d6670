"""torch.compile's kernels as a standalone candidate (the `inductor` proposer's seed).

`capture` runs in a child process and asks Inductor for its code; `standalone` turns that code
into an op file that launches the same Triton kernels without torch.compile.
"""
