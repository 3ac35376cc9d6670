"""Imports the evaluator."""
import okgit.eval.worker
