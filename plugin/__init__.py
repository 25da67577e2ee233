"""Composition root of ReflectWorld: manifest, server factory, transports and CLI."""

from plugin.errors import BackendUnavailableError, ManifestError, PluginError, ServeError
from plugin.manifest import Manifest, default_manifest, load_manifest, parse_manifest

__all__ = [
    "BackendUnavailableError",
    "Manifest",
    "ManifestError",
    "PluginError",
    "ServeError",
    "default_manifest",
    "load_manifest",
    "parse_manifest",
]
