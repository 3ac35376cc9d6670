"""`python -m okgit.eval.judge --device cpu|cuda`: the judge process (okgit.eval.judge.process)."""

from okgit.eval.judge.process import main

main()
