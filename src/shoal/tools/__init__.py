"""Tool adapters a worker runs attempts with, behind the small `Tool` protocol."""
