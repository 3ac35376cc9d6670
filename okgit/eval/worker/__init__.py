"""What runs in a worker process, beside the op's code: a candidate's worker
(`python -m okgit.eval.worker`, okgit.eval.worker.candidate), and what every worker process does
with an op file (load it, draw inputs, call, time, profile, export outputs), which the judge
process shares to run the reference the same way.

Nothing here imports the parent's code (okgit.eval.parent) or the judge's (okgit.eval.judge):
the candidate can reach whatever this process imported (tests/eval/test_eval_sides.py).
"""
