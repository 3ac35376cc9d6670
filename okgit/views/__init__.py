"""How runs and results read to a person: history's and doctor's tables, the plain progress
lines, report.md and its figures, an evaluation's text. Nothing here decides anything: each
module renders what the journal (okgit.journal), the evaluator (okgit.eval.types) or the search
hands it; the live view is okgit.tui."""
