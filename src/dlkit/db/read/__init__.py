"""Reading a database: open it memory-mapped and validated (``reader``), and prove it
intact (``verify``)."""
