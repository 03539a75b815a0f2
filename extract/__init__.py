"""Cost models and extractors."""
