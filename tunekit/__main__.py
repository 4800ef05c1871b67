import sys

from tunekit.cli import main

sys.exit(main())
