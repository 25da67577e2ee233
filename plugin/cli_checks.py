"""Argument checks of the CLI: what `ingest` accepts as a path, and stores that must already exist."""

from __future__ import annotations

from pathlib import Path

from plugin.errors import PluginError

__all__ = ["ingest_path", "require_store"]

MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255


def ingest_path(raw: str) -> Path:
    """The file ``reflectworld ingest`` should read.

    Raises:
        PluginError: ``raw`` is a stream URL (``run --source`` takes those) or an impossible path.
    """
    if "://" in raw:
        from perception.media.sources import redact_uri

        raise PluginError(f"`reflectworld ingest` reads a file; {redact_uri(raw)} is a stream — capture it with "
                          f"`reflectworld run --source {redact_uri(raw)}` (add the credentials back) or list it "
                          "under `sources:` in the manifest")
    if "\x00" in raw:
        raise PluginError("the path contains a NUL character; pass a plain file path")
    if len(raw) > MAX_PATH_CHARS or any(len(part) > MAX_NAME_CHARS for part in raw.split("/")):
        raise PluginError(f"the path is too long (at most {MAX_PATH_CHARS} characters, {MAX_NAME_CHARS} per name)")
    return Path(raw).expanduser()


def require_store(uri: str) -> None:
    """Refuse to read a local store that does not exist (a typo would otherwise create an empty one).

    Raises:
        PluginError: ``uri`` is a local path without a ReflectWorld store in it.
    """
    if "://" in uri:
        return  # object stores: the connection reports a missing bucket or prefix itself
    path = Path(uri).expanduser()
    if not (path / "meta.lance").is_dir():
        raise PluginError(f"no memory store at {path}; check --store / memory.uri (ingest something first with "
                          "`reflectworld ingest FILE --store …`)")
