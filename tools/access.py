"""What a tool call may reach: local paths under allowed roots, stream URLs on allowed networks.

Tool arguments are untrusted: host agents act on text they read in web pages and messages. Every
tool argument that names a local path (``capture_start`` source, ``entity_update`` image_path) or
a stream URL (``capture_start`` source) passes :class:`AccessPolicy` first. Sources written in
the manifest itself, and paths given on the command line, are trusted and never pass through here.

Paths. A path is allowed when, after ``~`` expansion and with symbolic links resolved, it lies
under one of ``access.roots`` (default: the user's home directory and the ReflectWorld data
directory) and no directory below that root is hidden (``~/.ssh``, ``~/.config`` …) unless
``access.hidden`` is set. A path outside the roots is refused *before* the file system is asked
anything, with one text whether or not it exists.

URLs. The scheme must be listed in ``access.url_schemes`` (rtsp, rtsps, http, https). The host is
resolved and every address must be allowed (:meth:`AccessPolicy.address_ok`, on the one classifier
of :mod:`perception.media.addresses`, which reads the IPv4 address inside every IPv6 form): private
LAN ranges when ``access.lan`` (default on), public addresses when ``access.public`` (default on),
loopback only when ``access.loopback``, and anything listed in ``access.networks``. Link-local,
cloud metadata, unspecified and multicast addresses are always refused. A refused URL gets one
text, without connecting, so a tool call cannot tell closed, silent and open ports apart behind it.
That check is the early answer; the capture itself fetches with :meth:`AccessPolicy.net_guard`,
which checks and pins every hop again (redirects, HLS entries, each new lookup of the name).

Playlists. A local playlist or concat list (:data:`PLAYLIST_SUFFIXES`) is refused: its entries
could name files or URLs outside the roots. (Renamed ones cannot be opened as playlists either:
local media are opened with media-only demuxers.) A folder's files are each checked on reading.

Limits. ``open_timeout_s`` / ``read_timeout_s`` (and the other caller-chosen durations) are clamped
to ``access.max_timeout_s``; paths and names are limited in UTF-8 bytes (4096 per path, 255 per
name, as file systems count). :func:`start_checked` is how an untrusted caller starts a capture.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from platformdirs import user_data_dir

from perception.errors import MediaError
from perception.media.addresses import NEVER, Address, classify, reached
from perception.media.fetch import NetGuard

__all__ = ["AccessDenied", "AccessPolicy", "PLAYLIST_SUFFIXES", "policy_of"]

logger = logging.getLogger(__name__)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: local files that name other files or URLs (playlists, concat lists): never accepted from a tool call
PLAYLIST_SUFFIXES = frozenset({".m3u8", ".m3u", ".ffconcat", ".concat", ".mpd", ".sdp", ".pls", ".xspf", ".txt",
                               ".ism", ".ismc", ".f4m", ".cue"})

MAX_PATH_BYTES = 4096
#: a file or folder name, in UTF-8 bytes (what file systems count)
MAX_NAME_BYTES = 255
#: options whose values are durations a caller may choose; each is clamped to max_timeout_s
TIMEOUT_OPTIONS = ("open_timeout_s", "read_timeout_s", "stall_s", "backoff_s", "backoff_max_s")


class AccessDenied(ValueError):
    """A tool argument names a path or URL the manifest's ``access`` section does not allow."""


def default_roots() -> list[Path]:
    """The user's home directory and the ReflectWorld data directory."""
    base = os.environ.get("REFLECTWORLD_DATA_DIR") or user_data_dir("reflectworld", appauthor=False)
    return [Path.home(), Path(base).expanduser()]


@dataclass
class AccessPolicy:
    """The ``access`` section, applied (see the module docstring)."""

    roots: list[Path] = field(default_factory=default_roots)
    hidden: bool = False
    url_schemes: tuple[str, ...] = ("rtsp", "rtsps", "http", "https")
    lan: bool = True
    public: bool = True
    loopback: bool = False
    networks: tuple[IPNetwork, ...] = ()
    devices: bool = True
    max_timeout_s: float = 30.0
    resolve: Any = None  # host -> list of address strings; socket.getaddrinfo by default

    def __post_init__(self) -> None:
        self.roots = [Path(os.path.abspath(Path(r).expanduser())) for r in self.roots]
        self._real_roots = [Path(os.path.realpath(r)) for r in self.roots]

    @classmethod
    def from_config(cls, cfg: Any) -> AccessPolicy:
        """Build from the manifest's ``access`` section (``None``: the defaults)."""
        if cfg is None:
            return cls()
        return cls(roots=[Path(r) for r in cfg.roots] if cfg.roots is not None else default_roots(),
                   hidden=cfg.hidden, url_schemes=tuple(cfg.url_schemes), lan=cfg.lan, public=cfg.public,
                   loopback=cfg.loopback, networks=tuple(ipaddress.ip_network(n, strict=False) for n in cfg.networks),
                   devices=cfg.devices, max_timeout_s=cfg.max_timeout_s)

    # ------------------------------------------------------------------ paths

    def _roots_text(self) -> str:
        return ", ".join(str(r) for r in self.roots) or "(none)"

    def _outside(self, what: str) -> AccessDenied:
        return AccessDenied(f"{what} is not a readable path under the allowed roots ({self._roots_text()}); "
                            "put it under one of them, or add its folder to access.roots in the manifest")

    def check_path(self, raw: str, what: str = "the path") -> Path:
        """The resolved path when ``raw`` lies under an allowed root; existence is not checked.

        Raises:
            AccessDenied: the path is outside the roots, hidden, malformed or too long (one text for
                every path outside the roots, whether or not it exists).
        """
        if "\x00" in raw:
            raise AccessDenied(f"{what} contains a NUL character; pass a plain file path")
        encoded = raw.encode("utf-8", "surrogatepass")
        if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
            raise AccessDenied(f"{what} is too long (at most {MAX_PATH_BYTES} bytes in UTF-8, "
                               f"{MAX_NAME_BYTES} per name); pass a shorter path")
        text = raw.removeprefix("file://")
        try:
            lexical = Path(os.path.abspath(os.path.expanduser(text)))
        except (OSError, RuntimeError, ValueError):
            raise self._outside(what) from None
        if not self._under(lexical, self.roots):  # decided before the file system is touched
            raise self._outside(what)
        try:
            real = Path(os.path.realpath(lexical))
        except (OSError, RuntimeError, ValueError):
            raise self._outside(what) from None
        if not self._under(real, self._real_roots):  # a link inside a root pointing out of it
            raise self._outside(what)
        return real

    def _under(self, path: Path, roots: Iterable[Path]) -> bool:
        for root in roots:
            try:
                rel = path.relative_to(root)
            except ValueError:
                continue
            if self.hidden or not any(part.startswith(".") for part in rel.parts):
                return True
        return False

    # ------------------------------------------------------------------ sources

    def check_source(self, uri: str) -> str:
        """``uri`` when a tool call may capture it (paths: the resolved path).

        Raises:
            AccessDenied: the path or URL is not allowed (see the module docstring).
        """
        if uri.startswith("phone:"):
            return uri
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme == "v4l2" or uri.startswith("/dev/video"):
            if not self.devices:
                raise AccessDenied("capturing local video devices is disabled (access.devices: false)")
            device = uri.removeprefix("v4l2://")
            if not device.startswith("/dev/video") or not device[len("/dev/video"):].isdigit():
                raise AccessDenied("a video device is /dev/videoN (N a number)")
            return uri
        if scheme in ("", "file"):
            path = self.check_path(uri, "the source")
            if path.suffix.lower() in PLAYLIST_SUFFIXES:
                raise AccessDenied("playlists and concat lists are not accepted from tool calls (their entries "
                                   "could name files outside the allowed roots); pass a media file or a folder "
                                   "of images, or list the playlist in the manifest's sources")
            return str(path)
        return self.check_url(uri)

    def _refused_text(self) -> str:
        return ("this stream's host is not on a network tool calls may reach (LAN "
                f"{'allowed' if self.lan else 'refused'}, public {'allowed' if self.public else 'refused'}"
                f", loopback {'allowed' if self.loopback else 'refused'}, link-local and cloud "
                "metadata always refused); list its network in access.networks or add the source "
                "to the manifest's sources")

    def net_guard(self) -> NetGuard:
        """The guard a tool call's network source fetches with: every hop (redirect, playlist entry,
        reconnect) is resolved once, checked with :meth:`address_ok` and pinned."""
        return NetGuard(allow=self.address_ok, schemes=tuple(s for s in self.url_schemes), resolve=self.resolve,
                        refused=self._refused_text(), tls_verify=True)

    def check_url(self, uri: str) -> str:
        """``uri`` when its scheme and every address of its host are allowed.

        This is the early answer to a tool call; the fetch itself checks every hop again
        (:meth:`net_guard`).

        Raises:
            AccessDenied: with one text for every refused host (nothing is connected).
        """
        if len(uri.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
            raise AccessDenied(f"the URL is too long (at most {MAX_PATH_BYTES} bytes)")
        scheme = uri.split("://", 1)[0].lower()
        if scheme not in self.url_schemes:
            raise AccessDenied(f"URL scheme {scheme!r} is not allowed for tool calls; allowed: "
                               f"{', '.join(self.url_schemes) or 'none'} (access.url_schemes)")
        try:
            host = urlsplit(uri).hostname
        except ValueError:
            raise AccessDenied("the URL is malformed; pass scheme://host[:port]/path") from None
        if not host:
            raise AccessDenied("the URL has no host; pass scheme://host[:port]/path")
        if not (self.lan or self.public or self.loopback or self.networks):
            raise AccessDenied(self._refused_text())  # no address could pass: do not even resolve the name
        try:
            self.net_guard().pin(uri)
        except MediaError:
            raise AccessDenied(self._refused_text()) from None
        return uri

    def address_ok(self, addr: Address) -> bool:
        """Whether a tool call's source may connect to ``addr``: every IPv4 address an IPv6 form carries
        must pass too (see :mod:`perception.media.addresses`)."""
        for reach in reached(addr):
            kind = classify(reach)
            if kind in NEVER:
                return False
            if any(reach in n for n in self.networks if n.version == reach.version):
                continue
            if not ((kind == "loopback" and self.loopback) or (kind == "private" and self.lan)
                    or (kind == "public" and self.public)):
                return False
        return True

    # ------------------------------------------------------------------ options

    def clamp_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """``options`` with every caller-chosen duration bounded to (0, max_timeout_s].

        ``rtsp_transport`` can only be ``tcp``: over UDP the camera's SETUP answer names where FFmpeg
        sends its packets (``source=``, multicast ``destination=``), and the other transports tunnel
        over HTTP; a UDP-only camera belongs in the manifest's sources.

        Raises:
            AccessDenied: a duration is not a number, or the RTSP transport is not tcp.
        """
        out = dict(options or {})
        if "rtsp_transport" in out and out["rtsp_transport"] != "tcp":
            raise AccessDenied("option rtsp_transport can only be tcp for a tool call (over UDP the camera names "
                               "where packets go); list a UDP-only camera in the manifest's sources")
        for key in TIMEOUT_OPTIONS:
            if key in out:
                value = out[key]
                if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                    raise AccessDenied(f"option {key} must be a number of seconds (0 < {key} ≤ {self.max_timeout_s:g})")
                out[key] = min(max(float(value), 0.1), self.max_timeout_s)
        return out


async def start_checked(worker: Any, policy: AccessPolicy, source: str, camera_id: str | None,
                        options: dict[str, Any] | None) -> Any:
    """Start a capture an untrusted caller (a tool call, the dashboard) names: the source is checked
    (on the worker's own pool: a name may take seconds to resolve), and the capture fetches under the
    policy's guard (every hop) and, for folders, its path check (every file)."""
    opts = policy.clamp_options(options)
    checked = await worker.run_check(policy.check_source, source)
    return await worker.start_capture_async(checked, camera_id, opts, guard=policy.net_guard(),
                                            confine=lambda p: policy.check_path(p, "a file of the folder"))


def policy_of(ctx: Any) -> AccessPolicy:
    """The access policy of the manifest a tool call's server runs with."""
    manifest = getattr(ctx.request_context.lifespan_context, "manifest", None)
    return AccessPolicy.from_config(getattr(manifest, "access", None))
