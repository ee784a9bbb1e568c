"""``python -m launcher`` = the ``arena`` command (works without installing the console script)."""

from launcher.cli.app import main

if __name__ == "__main__":
    main()
