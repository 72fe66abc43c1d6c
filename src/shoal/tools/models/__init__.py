"""Model API clients for Shoal's agent loop, one per vendor."""
