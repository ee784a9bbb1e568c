"""``python -m green_agent`` = ``arena-green`` (see :mod:`green_agent.service.main`)."""

import sys

from green_agent.service.main import main

if __name__ == "__main__":
    sys.exit(main())
