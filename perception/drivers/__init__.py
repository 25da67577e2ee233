"""Segments → memory: the per-segment analyzer and the file and live drivers."""
