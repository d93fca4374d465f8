import sys

from nodeheal.cli import main

sys.exit(main())
