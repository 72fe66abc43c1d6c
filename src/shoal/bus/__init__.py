"""Event fan-out between control-plane copies and their clients: in-process or Redis."""
