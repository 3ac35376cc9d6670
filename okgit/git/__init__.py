"""The git layer: the user's repository (`repo`), a run's worktree, branch, commits and tags
(`workspace`), the append-only journal (`journal`), diffs validated, resolved, applied and
reverted (`patch`), and the runs and candidates read back from journals (`history`)."""
