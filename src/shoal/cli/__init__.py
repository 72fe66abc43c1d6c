"""The `shoal` command line: its commands by noun (`app.py` puts them together), the API
client they share, the live view of a task, and `shoal up`'s composition (`embedded.py`)."""
