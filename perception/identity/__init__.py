"""Detections → entity ids: galleries, the resolver (the only identity writer), reference stills, the per-user service."""
