"""The loop around the engine: group-committed decisions, dispatch, leases, recovery."""
