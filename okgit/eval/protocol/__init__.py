"""What passes between the evaluator's processes: the parent, the judge and a candidate's worker.

Plain data only (JSON): the jobs the parent hands out, the message channel, the judge's answers.
Both sides import this folder; neither side imports the other's (tests/eval/test_eval_sides.py).
"""
