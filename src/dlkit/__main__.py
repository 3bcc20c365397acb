"""``python -m dlkit`` runs the command-line interface."""

from dlkit.cli import main

if __name__ == "__main__":
    main()
