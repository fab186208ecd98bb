"""Placement backends; importing this package registers them all."""
