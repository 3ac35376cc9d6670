"""The evaluator's parent side: what runs in okgit's own process. It spawns and limits the worker
processes, prepares references through the judge, relays between them, and decides the verdict;
it never imports candidate code, holds no tensor, and imports nothing of the worker's or the
judge's code (tests/eval/test_eval_sides.py).
"""
