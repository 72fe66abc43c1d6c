"""Request and response shapes of the REST API (seed 004 §4.1), Pydantic at the boundary: one
module per resource (`tasks`, `subtasks`, `checkpoints`, `workers`, `auth`) over `base`."""
