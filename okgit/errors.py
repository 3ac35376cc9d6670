"""Errors that reach the user as one line (exit 1), and usage errors (exit 2)."""


class OkgitError(Exception):
    """A problem the user can act on; the CLI prints its message alone and exits 1."""

    exit_code = 1


class UsageError(OkgitError):
    """Bad arguments or flags; exit 2."""

    exit_code = 2
