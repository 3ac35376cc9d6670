from okgit.cli import entry

entry()
