"""The ``dlkit`` command: a thin adapter that parses, calls the library and renders."""
