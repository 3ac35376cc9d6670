"""The judge process (`python -m okgit.eval.judge`, okgit.eval.judge.process): the trusted
process that owns a problem's reference, its expected outputs and the comparisons.

It runs the reference with the worker's own op-file code (okgit.eval.worker), so both sides load,
draw and call alike; a candidate's worker never imports this folder (tests/eval/test_eval_sides.py).
"""
