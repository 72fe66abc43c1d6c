"""Files produced by subtasks: safe names, content-addressed storage, manifests, zip export."""
