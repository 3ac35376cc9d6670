import sys

from okgit.cli import main

sys.exit(main())
