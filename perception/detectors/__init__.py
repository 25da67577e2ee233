"""Pixels and audio → detections: faces, objects, text, speech, body descriptors, and their lazy loading."""
