"""Evaluations Shoal ships with their data: `shoal eval research` (`shoal.evals.research`)."""
