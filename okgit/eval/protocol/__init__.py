"""What passes between the evaluator's processes: the parent, the judge and a candidate's worker.

Plain data (JSON): the jobs the parent hands out, the message channel, the judge's answers; and
what every process's start and end share: the device's lock through a start, the reaper a
worker runs under. Both sides import this folder; neither side imports the other's
(tests/eval/test_eval_sides.py).
"""
