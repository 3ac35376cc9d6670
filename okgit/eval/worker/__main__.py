"""`python -m okgit.eval.worker --device cpu|cuda`: a candidate's worker (okgit.eval.worker.candidate)."""

from okgit.eval.worker.candidate import main

main()
