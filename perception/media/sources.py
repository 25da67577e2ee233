"""Media sources behind one interface: files, RTSP/RTSPS, HTTP(S), V4L2, image folders, phone uploads.

:func:`make_source` parses a URI into a :class:`Source`. A source knows its *key* (the identity
stored in memory, with any credentials removed), whether it is *live*, and how to
:meth:`~Source.open_stream`: a generator of :class:`VideoIn` / :class:`AudioIn` items with the
stream's own timestamps (``None`` when a live packet has none). Sampling, time mapping, queues and
reconnects are the gateway's job (:mod:`perception.media.gateway`).

HTTP(S) sources (MPEG-TS, HLS, MP4) are fetched by :mod:`perception.media.fetch` (every hop pinned
and checked by the source's :class:`~perception.media.fetch.NetGuard`) and FFmpeg reads the fetched
bytes through media-only demuxers; a checked RTSP source is opened by FFmpeg through a loopback
relay to the checked address (:mod:`perception.media.rtsp_relay`: no redirect gets through). Every network
open uses both socket timeouts and PyAV's interrupt-based ``timeout=(open, read)``: without them a
silent server hangs ``av.open`` forever. Every packet of a live stream is decoded (the first IDR
packet may carry no timestamp).

URI forms: a file path; ``rtsp://`` / ``rtsps://``; ``http(s)://`` (MPEG-TS, HLS ``.m3u8``, faststart
MP4); ``/dev/videoN`` or ``v4l2:///dev/videoN``; a folder of images; ``phone:CAMERA`` (chunks posted by
the phone page, :mod:`plugin.phone`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import av
import av.error
import cv2
import numpy as np

from perception.media.audio import DIGITAL_SILENCE, MAX_BAD_RUN, SAMPLE_RATE
from perception.errors import MediaError
from perception.media.fetch import LOCAL_MEDIA_OPTIONS, MEDIA_OPTIONS, FetchRefused, NetGuard, open_media
from perception.media.bytefeed import ByteFeed
from perception.media.images import read_image
from perception.media.keygate import KeyframeGate
from perception.media.redact import redact_uri
from perception.media.rtsp_relay import RtspRelay
from perception.media.video import resize_long_side

__all__ = [
    "AudioIn", "ByteFeed", "IMAGE_SUFFIXES", "Source", "SourceError", "SourceOptions", "VideoIn",
    "make_source", "redact_uri",
]

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
#: protocols a network source may open (an HLS playlist must not pull in file: or other local URLs)
_NET_PROTOCOLS = "rtsp,rtsps,rtp,srtp,udp,tcp,tls,http,https,httpproxy,crypto,data"


class SourceError(MediaError):
    """A source cannot be opened or read (missing, unreachable, unsupported, corrupt, stalled)."""


@dataclass(frozen=True)
class VideoIn:
    """One decoded video frame: stream time in seconds (or ``None``) and the frame."""

    t: float | None
    frame: Any  # av.VideoFrame or a BGR ndarray

    def to_bgr(self, max_side: int | None = None) -> np.ndarray:
        """The frame as a BGR uint8 array, downscaled so its long side is at most ``max_side``."""
        frame = self.frame
        if not isinstance(frame, np.ndarray):
            small = _small_bgr(frame, max_side) if max_side is not None else None
            if small is not None:
                return small
            frame = frame.to_ndarray(format="bgr24")
        return frame if max_side is None else resize_long_side(frame, max_side)


#: colour spaces whose YUV → BGR conversion is BT.601 (unspecified, BT.470BG, SMPTE 170M); ranges: unspecified, limited
_BT601 = frozenset({2, 5, 6})
_LIMITED = frozenset({0, 1})


def _small_bgr(frame: Any, max_side: int) -> np.ndarray | None:
    """A BT.601, limited-range 4:2:0 frame downscaled in YUV, then converted: ``None`` for any other frame.

    Area-averaging the planes before the colour conversion costs a third of converting the whole
    frame first; OpenCV's conversion is also closer to the BT.601 formula than FFmpeg's default
    one (mean error 0.25 against 1.2 grey levels on the bench clip).
    """
    w, h = frame.width, frame.height
    scale = max_side / max(w, h)
    size = (round(w * scale), round(h * scale))
    if (frame.format.name != "yuv420p" or frame.colorspace not in _BT601 or frame.color_range not in _LIMITED
            or scale >= 1 or w % 2 or h % 2 or size[0] % 2 or size[1] % 2):
        return None
    sw, sh = size
    out = np.empty(sw * sh * 3 // 2, np.uint8)  # I420: Y (sw × sh), then U and V (sw/2 × sh/2 each)
    start = 0
    for plane, (pw, ph), (tw, th) in zip(frame.planes, ((w, h), (w // 2, h // 2), (w // 2, h // 2)),
                                         ((sw, sh), (sw // 2, sh // 2), (sw // 2, sh // 2))):
        rows = np.frombuffer(plane, np.uint8)[:plane.line_size * ph].reshape(ph, plane.line_size)[:, :pw]
        out[start:start + tw * th] = cv2.resize(rows, (tw, th), interpolation=cv2.INTER_AREA).reshape(-1)
        start += tw * th
    return cv2.cvtColor(out.reshape(sh * 3 // 2, sw), cv2.COLOR_YUV2BGR_I420)


@dataclass(frozen=True)
class AudioIn:
    """A chunk of 16 kHz mono float32 audio starting at stream time ``t`` (or ``None``)."""

    t: float | None
    pcm: np.ndarray


class SourceOptions(dict[str, Any]):
    """Free-form per-source options (``open_timeout_s``, ``read_timeout_s``, ``rtsp_transport``,
    ``image_interval_s``, ``video_size``, ``framerate``, ``input_format``)."""


#: how much faster than its sampling a stream must run for its unreferenced frames to be skipped
SPARSE_RATIO = 3.0


@dataclass
class Source:
    """A media source. Subclasses implement :meth:`open_stream`."""

    uri: str
    kind: str
    live: bool
    options: dict[str, Any] = field(default_factory=dict)
    #: packets skipped because they did not decode (across reconnects)
    bad_packets: int = field(default=0, compare=False)
    #: audio packets of digital silence passed on as zeros without decoding (see ``_AudioChunker``)
    silent_packets: int = field(default=0, compare=False)
    #: a file whose reading broke off before its end (a truncated download or recording)
    truncated: bool = field(default=False, compare=False)
    #: decode only key frames (set by the gateway during a long static, silent stretch)
    keyframes_only: bool = field(default=False, compare=False)
    #: ... and of those only the ones whose packet sizes (or age) call for a look
    key_gate: KeyframeGate = field(default_factory=KeyframeGate, compare=False, repr=False)
    #: what a network source may connect to (``None``: a trusted source, any host; see :mod:`perception.media.fetch`)
    guard: NetGuard | None = field(default=None, compare=False, repr=False)
    #: checks a local file before it is read, returning its resolved path (``None``: a trusted source)
    confine: Callable[[str], Path] | None = field(default=None, compare=False, repr=False)
    #: frames the consumer samples per second (set by the gateway); a stream at least
    #: :data:`SPARSE_RATIO` times faster does not decode the frames no other frame refers to
    sample_fps: float | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """The source's identity in memory: the redacted URI (files: their resolved path)."""
        return redact_uri(self.uri)

    @property
    def default_camera(self) -> str:
        """A camera id derived from the source."""
        if self.kind in ("file", "images"):
            return Path(self.uri).stem or "camera"
        parts = urlsplit(self.key)
        name = (parts.hostname or "cam") + (parts.path or "").replace("/", "_")
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or self.kind

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        """Open the source and yield decoded items until it ends, fails or ``stop`` is set.

        Raises:
            SourceError: it cannot be opened or a read fails/times out.
        """
        raise NotImplementedError


def _av_error(source: Source, exc: BaseException, action: str) -> SourceError:
    name = type(exc).__name__
    detail = getattr(exc, "strerror", None) or str(exc)
    hint = {
        "file": "the file is corrupt or not an audio/video format FFmpeg understands",
        "rtsp": "check that the camera is reachable, the path and credentials are right, and RTSP over TCP is allowed",
        "http": "check the URL; MP4 over HTTP must be faststart (moov first), or use MPEG-TS/HLS",
        "v4l2": "check that the device exists and is not in use by another program",
        "phone": "reload the phone page and start the camera again",
    }.get(source.kind, "check the source")
    return SourceError(f"cannot {action} {source.key!r} ({name}: {detail}); {hint}", source.key)


class AVSource(Source):
    """A source FFmpeg opens: file, RTSP/RTSPS, HTTP(S) stream (fetched here, :mod:`perception.media.fetch`),
    V4L2 device."""

    def _open(self, stop: threading.Event) -> tuple[Any, Any]:
        """The open container, and the fetched byte stream it reads (``None`` when FFmpeg reads itself)."""
        o = self.options
        open_t = float(o.get("open_timeout_s", 10.0))
        read_t = float(o.get("read_timeout_s", 10.0))
        if self.kind == "file":
            return av.open(self.uri, options=dict(LOCAL_MEDIA_OPTIONS)), None
        if self.kind == "rtsp":
            opts = {"rtsp_transport": str(o.get("rtsp_transport", "tcp")), "timeout": str(int(read_t * 1e6)),
                    "protocol_whitelist": _NET_PROTOCOLS}
            if self.guard is None:
                return av.open(self.uri, options=opts, timeout=(open_t, read_t)), None
            # a checked source talks to the checked address through a relay that lets no redirect through
            relay = RtspRelay(self.guard.pin(self.uri), open_t, read_t)
            try:
                return av.open(relay.url(self.uri), options=opts, timeout=(open_t, read_t)), relay
            except (av.error.FFmpegError, OSError) as exc:
                relay.close()
                if relay.refused is not None:
                    raise FetchRefused(relay.refused, self.key) from exc
                raise
        if self.kind == "http":
            feed = open_media(self.uri, self.guard or NetGuard(), open_t, read_t, stop)
            try:
                return av.open(feed, mode="r", options=dict(MEDIA_OPTIONS), timeout=(open_t, read_t)), feed
            except BaseException:
                feed.close()
                raise
        if self.kind == "v4l2":
            device = self.uri.removeprefix("v4l2://")
            opts = {k: str(o[k]) for k in ("video_size", "framerate", "input_format") if k in o}
            return av.open(device, format="v4l2", options=opts, timeout=(open_t, read_t)), None
        raise AssertionError(self.kind)

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        if self.kind == "file" and not Path(self.uri).is_file():
            raise SourceError(f"media file not found: {self.uri!r}; check the path", self.uri)
        try:
            container, feed = self._open(stop)
        except FetchRefused as exc:
            raise SourceError(f"cannot open {self.key!r}: {exc}", self.key) from exc
        except (av.error.FFmpegError, OSError, MediaError) as exc:
            raise _av_error(self, exc, "open") from exc
        try:
            with container:
                yield from _demux(self, container, stop, start_s)
        except SourceError:
            raise
        except MediaError as exc:  # a later hop (a playlist's next segment, a reload) was refused or failed
            raise SourceError(f"cannot read {self.key!r} on: {exc}", self.key) from exc
        finally:
            if feed is not None:
                feed.close()


def _demux(source: Source, container: Any, stop: threading.Event, start_s: float) -> Iterator[VideoIn | AudioIn]:
    """Decode every packet of the first video and audio streams of an open container."""
    if not container.streams.video:
        raise SourceError(f"{source.key!r} has no video stream; pass a video source", source.key)
    vs = container.streams.video[0]
    # One decode thread per source: frame threading decodes ~20 % faster in wall time but costs
    # ~20 % more CPU for the same frames, and a box runs many sources at once.
    vs.thread_count = 1
    rate = float(vs.average_rate or 0)
    if source.sample_fps and rate >= SPARSE_RATIO * source.sample_fps:
        # Most B-frames: a sampled grid still gets a frame within a few stream frames of each slot,
        # and a file skips the same frames on every run (resume stays exact). Saves ~35 % of decoding.
        vs.codec_context.skip_frame = "NONREF"
    want_audio = bool(source.options.get("audio", True))
    audio = container.streams.audio[0] if (container.streams.audio and want_audio) else None
    if start_s > 0 and not source.live and vs.time_base is not None:
        try:
            container.seek(int(start_s / vs.time_base), stream=vs)
        except av.error.FFmpegError:
            logger.warning("seek to %.2fs failed in %s; decoding from the start", start_s, source.key)
            try:
                container.seek(0, stream=vs)
            except av.error.FFmpegError:
                pass  # a fetched stream cannot seek: it is read from where it is (the gateway skips to start_s)
    chunks = _AudioChunker() if audio is not None else None
    streams = [vs] if audio is None else [vs, audio]
    decoded = 0
    bad_run = 0
    # After a key-frame-only stretch, inter frames refer to frames never decoded: full decoding
    # resumes at the next key frame.
    skipping = False
    gate = source.key_gate
    gate.restart()
    packets = container.demux(streams)
    while not stop.is_set():
        try:
            packet = next(packets)
        except StopIteration:
            break
        except (av.error.FFmpegError, OSError) as exc:
            if source.live or decoded == 0:
                raise _av_error(source, exc, f"read (after {decoded} frames)") from exc
            logger.warning("%s breaks off after %d frames (%s); keeping what was readable", source.key, decoded,
                           type(exc).__name__)
            source.truncated = True
            break
        video = packet.stream is vs
        if video:
            if packet.is_keyframe:
                skipping = not gate.decode_key(_packet_time(packet), packet.size, source.keyframes_only)
            else:
                gate.inter(packet.size)
                skipping = skipping or source.keyframes_only
            if skipping:
                continue
        elif chunks is not None and chunks.repeats_silence(packet):
            source.silent_packets += 1
            if chunks.ready:
                yield from chunks.flush()
            continue
        try:
            frames = packet.decode()  # every packet, even without a timestamp (live IDR)
        except av.error.FFmpegError as exc:
            # One damaged packet must not cost the whole file: skip it, count it, go on; only a
            # long run of them means the stream is corrupt.
            source.bad_packets += 1
            bad_run += 1
            if bad_run >= MAX_BAD_RUN:
                raise _av_error(source, exc, f"decode (after {decoded} frames and {bad_run} bad packets)") from exc
            continue
        bad_run = 0
        if video and source.keyframes_only:
            frames = [*frames, *_drain(vs, packet.time_base)]
        if video:
            if frames and chunks is not None:
                yield from chunks.flush()  # the audio decoded so far comes first, as in the stream
            for frame in frames:
                decoded += 1
                yield VideoIn(None if frame.time is None else float(frame.time), frame)
        elif chunks is not None:
            chunks.decoded(packet, frames)
            for frame in frames:
                if chunks.add(frame):
                    yield from chunks.flush()
    if chunks is not None:
        yield from chunks.flush()
    if decoded == 0 and not source.live and not stop.is_set():
        raise SourceError(f"{source.key!r} decoded to no video frames; the file is corrupt or truncated", source.key)


def _packet_time(packet: Any) -> float | None:
    """A packet's stream time in seconds (``None`` without a timestamp)."""
    if packet.pts is None or packet.time_base is None:
        return None
    return float(packet.pts * packet.time_base)


def _drain(vs: Any, time_base: Any) -> list[Any]:
    """The frames a decoder holds back for reordering, and a fresh decoder state after them.

    Between key frames decoded on their own, a decoder with B-frame reordering would hand each
    one out only two key frames later: a still camera would notice a change two GOPs late.
    """
    try:
        frames = vs.codec_context.decode(None)
    except av.error.FFmpegError:
        frames = []
    vs.codec_context.flush_buffers()
    for frame in frames:
        frame.time_base = time_base
    return list(frames)


#: seconds of decoded audio resampled and handed on at once
AUDIO_CHUNK_S = 0.5
#: seconds of skipped digital silence handed on at once (any sound, or a video frame, hands it on sooner)
SILENT_CHUNK_S = 2.0
_FLOAT_FORMATS = frozenset({"flt", "fltp", "dbl", "dblp"})


class _AudioChunker:
    """Decoded audio frames gathered into chunks of 16 kHz mono, at most :data:`AUDIO_CHUNK_S` long.

    A compressed stream decodes to ~47 audio frames a second; resampling and handing on each one
    cost more than decoding it (most of what a silent camera spends). The demuxer flushes the
    chunk before each decoded video frame, so audio and video reach the consumer in stream order
    (the live driver's speech state at a frame is what it was): chunks are as long as the gap
    between decoded video frames, a whole :data:`AUDIO_CHUNK_S` while only key frames are decoded.
    The resampler is a stream filter, so the samples are the same however the input is chunked.

    Digital silence (a muted microphone, a camera that sends a silent track) is encoded as the same
    few bytes packet after packet. Once a packet has decoded to silence twice in a row from a silent
    decoder, its repeats are not decoded (:meth:`repeats_silence`): a decoder fed only silence stays
    silent, so their samples are queued as zeros. The first packet that differs is decoded as usual.
    """

    def __init__(self) -> None:
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        self._fifo = av.AudioFifo()
        self._held: Any = None  # a frame queued once what came before it is flushed
        self._reset = False  # the held frame changes format, layout or rate: a fresh fifo and resampler
        self._t: float | None = None  # stream time of the fifo's first sample
        self._last: bytes | None = None  # payload of the last packet decoded
        self._last_silent = False  # ... and whether it decoded to digital silence
        self._silence: tuple[bytes, int, int] | None = None  # (payload, samples, rate) of a silent repeat
        self._quiet = 0  # samples of skipped silent packets queued after the fifo's
        self._quiet_t: float | None = None  # stream time of the first of them
        self._quiet_rate = SAMPLE_RATE

    def add(self, frame: Any) -> bool:
        """Queue one decoded frame; True when a chunk is ready (:meth:`flush` it)."""
        if self._quiet:  # skipped silence comes first: hand it on, then this frame
            self._held, self._reset = frame, False
            return True
        if not self._fifo.samples:
            self._t = None if frame.time is None else float(frame.time)
        pts, frame.pts = frame.pts, None  # the fifo checks continuity of timestamps; times are kept here
        try:
            self._fifo.write(frame)
        except ValueError:  # the format, layout or rate changed: flush what came before, then start afresh
            frame.pts, self._held, self._reset = pts, frame, True
            return True
        return self._fifo.samples >= AUDIO_CHUNK_S * frame.sample_rate

    def decoded(self, packet: Any, frames: list[Any]) -> None:
        """Note what ``packet`` decoded to (whether its repeats may be skipped as silence)."""
        payload = bytes(packet)
        if payload != self._last:
            self._last, self._last_silent, self._silence = payload, False, None
            return
        silent = bool(frames) and all(_digital_silence(f) for f in frames)
        if silent and self._last_silent:
            self._silence = (payload, sum(f.samples for f in frames), frames[0].sample_rate)
        self._last_silent = silent

    def repeats_silence(self, packet: Any) -> bool:
        """Whether ``packet`` repeats the known silent one; if so its samples are queued (not decoded)."""
        if self._silence is None or packet.size != len(self._silence[0]) or bytes(packet) != self._silence[0]:
            return False
        _, samples, rate = self._silence
        if not self._quiet:
            self._quiet_t = _packet_time(packet)
            self._quiet_rate = rate
        self._quiet += samples
        return True

    @property
    def ready(self) -> bool:
        """Enough skipped silence is queued for a chunk."""
        return self._quiet >= SILENT_CHUNK_S * self._quiet_rate

    def flush(self) -> Iterator[AudioIn]:
        """Resample and yield whatever is queued (digital silence comes out as zeros, unresampled)."""
        yield from self._flush()
        if self._quiet:
            yield AudioIn(self._quiet_t, np.zeros(round(self._quiet * SAMPLE_RATE / self._quiet_rate), np.float32))
            self._quiet = 0
        if self._held is not None:
            frame, self._held = self._held, None
            if self._reset:
                self._fifo = av.AudioFifo()
                self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            self.add(frame)

    def _flush(self) -> Iterator[AudioIn]:
        queued = self._fifo.read() if self._fifo.samples else None
        if queued is None:
            return
        t = self._t
        if _digital_silence(queued):
            yield AudioIn(t, np.zeros(round(queued.samples * SAMPLE_RATE / queued.sample_rate), np.float32))
            return
        for out in self._resampler.resample(queued):
            yield AudioIn(t, out.to_ndarray().reshape(-1).astype(np.float32, copy=False))
            t = None if t is None else t + out.samples / SAMPLE_RATE


def _digital_silence(frame: Any) -> bool:
    """Whether a decoded float audio frame holds only digital silence."""
    return frame.format.name in _FLOAT_FORMATS and float(np.abs(frame.to_ndarray()).max()) < DIGITAL_SILENCE


class ImageFolderSource(Source):
    """A folder of still images, in name order, one every ``image_interval_s`` seconds of media time.

    With :attr:`~Source.confine` set, every file is resolved and checked on its own: a symbolic link
    leading out of the allowed roots is skipped, not followed.
    """

    def _confined(self, path: Path) -> Path | None:
        assert self.confine is not None
        try:
            real = self.confine(str(path))
        except ValueError:
            logger.warning("skipping %s: it leads outside the allowed roots", path.name)
            return None
        return real if real.is_file() else None

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        folder = Path(self.uri)
        if not folder.is_dir():
            raise SourceError(f"image folder not found: {self.uri!r}; check the path", self.uri)
        images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if self.confine is not None:
            images = [p for p in (self._confined(p) for p in images) if p is not None]
        if not images:
            raise SourceError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {self.uri!r}", self.uri)
        interval = float(self.options.get("image_interval_s", 1.0))
        for i, path in enumerate(images):
            t = i * interval
            if t < start_s - 1e-6:
                continue
            if stop.is_set():
                return
            try:
                image = read_image(path)
            except MediaError as exc:
                logger.warning("skipping %s: %s", path.name, exc)
                continue
            if image is None:
                logger.warning("skipping unreadable image %s", path)
                continue
            yield VideoIn(t, image)


class PhoneSource(Source):
    """A browser camera: MediaRecorder chunks posted to the server land in :attr:`feed`."""

    def __init__(self, uri: str, options: dict[str, Any]) -> None:
        super().__init__(uri=uri, kind="phone", live=True, options=options)
        self.feed = ByteFeed(read_timeout_s=float(options.get("read_timeout_s", 10.0)))

    @property
    def default_camera(self) -> str:
        return self.uri.removeprefix("phone:") or "phone"

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        if self.feed.closed:
            return
        self.feed.begin()
        try:
            # small probe: a live recording never reaches EOF, so probe on what the first chunks hold
            container = av.open(self.feed, mode="r", options={"probesize": "65536", "analyzeduration": "1000000",
                                                              **MEDIA_OPTIONS})
        except (av.error.FFmpegError, OSError) as exc:
            raise _av_error(self, exc, "open") from exc
        with container:
            yield from _demux(self, container, stop, 0.0)


def make_source(uri: str, options: dict[str, Any] | None = None, *, guard: NetGuard | None = None,
                confine: Callable[[str], Path] | None = None) -> Source:
    """Parse ``uri`` into a :class:`Source` (nothing is opened).

    ``guard`` limits what a network source connects to (every hop); ``confine`` checks every file a
    folder source reads (a tool call's source: the access policy's path check). Both ``None``: trusted.

    Raises:
        SourceError: the URI's scheme is not supported, or a local path does not exist.
    """
    opts = dict(options or {})
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if uri.startswith("phone:"):
        return PhoneSource(uri, opts)
    if scheme in ("rtsp", "rtsps"):
        return AVSource(uri=uri, kind="rtsp", live=True, options=opts, guard=guard)
    if scheme in ("http", "https"):
        return AVSource(uri=uri, kind="http", live=bool(opts.get("live", True)), options=opts, guard=guard)
    if scheme == "v4l2" or uri.startswith("/dev/video"):
        return AVSource(uri=uri, kind="v4l2", live=True, options=opts)
    if scheme and scheme != "file":
        raise SourceError(f"unsupported source {redact_uri(uri)!r}: use a file path, a folder of images, rtsp://, "
                          "rtsps://, http(s)://, /dev/videoN or phone:CAMERA", redact_uri(uri))
    path = Path(uri.removeprefix("file://")).expanduser()
    if path.is_dir():
        return ImageFolderSource(uri=str(path.resolve()), kind="images", live=False, options=opts, confine=confine)
    if not path.exists():
        raise SourceError(f"media file not found: {str(path)!r}; check the path", str(path))
    return AVSource(uri=str(path.resolve()), kind="file", live=False, options=opts)
