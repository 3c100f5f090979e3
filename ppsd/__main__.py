import sys

from ppsd.cli import main

sys.exit(main())
