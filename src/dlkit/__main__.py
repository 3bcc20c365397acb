"""``python -m dlkit`` runs the command-line interface."""

from dlkit.cli.app import main

if __name__ == "__main__":
    main()
