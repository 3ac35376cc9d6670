from okgit.cli import main
import sys

sys.exit(main())
