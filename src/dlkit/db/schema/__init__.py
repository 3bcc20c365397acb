"""What a database is declared to be: the ``dlkit.toml`` schema (``spec``), Arrow types to
semantic types, task rules, key inference and the RelBench import."""
