"""What a golden records beside its ids: prefix stability, cache-busters, round trips, control-token text."""
