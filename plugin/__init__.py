"""Composition root of ReflectWorld: manifest, server factory, transports and CLI."""

import os

# OpenBLAS (numpy's BLAS) keeps each worker thread spinning for about 2^28 cycles after every threaded
# call before it sleeps; between the many small matrix products of a stream that spinning cost ~0.65
# CPU-s per 91 s of media at the full level. 2^4 cycles lets the workers sleep at once: the thread
# count, and so every result, stays the same. OpenBLAS reads this when it loads, so it is set before
# anything imports numpy (every entry point imports this package first).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

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
