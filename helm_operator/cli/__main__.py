import sys

from helm_operator.cli.main import main

sys.exit(main())
