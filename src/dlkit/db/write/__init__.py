"""Building a database (``dlkit preprocess``): Parquet in, the directory the format
describes out (``writer`` runs the stages)."""
