"""Decode and probe media files with PyAV.

Frames are sampled on an absolute time grid (slot ``k`` covers ``k / sample_fps`` seconds), so
decoding from the start or seeking to ``start_s`` yields the same frames with the same indices
and timestamps: resumed ingestion depends on that. The code is blocking on purpose; async
callers run it in a worker thread.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import av.error
import cv2
import numpy as np

from perception.errors import MediaError
from perception.media.fetch import LOCAL_MEDIA_OPTIONS

logger = logging.getLogger(__name__)

#: Frames handed to analysis are resized so that their long side is at most this.
ANALYSIS_MAX_SIDE = 640

# Tolerance when comparing frame times with grid slots (timestamps are rationals turned floats).
_EPS = 1e-6


@dataclass(frozen=True)
class MediaInfo:
    """What :func:`probe` found out about a media file."""

    duration_s: float
    fps: float
    width: int
    height: int
    has_audio: bool
    #: media time of the first video frame (frame times run from here to start_s + duration_s)
    start_s: float = 0.0


@dataclass(frozen=True)
class Frame:
    """One sampled video frame: grid slot index, media seconds and a BGR image (H, W, 3)."""

    index: int
    t: float
    image_bgr: np.ndarray


def _check_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise MediaError(f"media file not found: {str(p)!r}; check the path", str(p))
    if not p.is_file():
        raise MediaError(f"not a regular file: {str(p)!r}; pass a video file, not a folder", str(p))
    return p


def _open(p: Path) -> av.container.InputContainer:
    try:
        return av.open(str(p), options=dict(LOCAL_MEDIA_OPTIONS))
    except av.error.FFmpegError as exc:
        raise MediaError(
            f"cannot read {str(p)!r} as media ({type(exc).__name__}: {exc.strerror or exc}); "
            "the file is corrupt or not an audio/video format FFmpeg understands",
            str(p),
        ) from exc


def _video_stream(container: av.container.InputContainer, p: Path) -> av.video.stream.VideoStream:
    if not container.streams.video:
        raise MediaError(f"{str(p)!r} has no video stream; pass a video file", str(p))
    return container.streams.video[0]


def probe(path: str | Path) -> MediaInfo:
    """Return duration, frame rate, size, audio presence and start time of a video file.

    Media times in this package are the stream's own timestamps (``frame.time``), which need
    not start at 0: the test clip starts at 0.85 s. ``start_s`` says where they start.

    Raises:
        MediaError: the file is missing, unreadable, or has no video stream.
    """
    p = _check_path(path)
    with _open(p) as container:
        vs = _video_stream(container, p)
        fps = float(vs.average_rate) if vs.average_rate else 0.0
        start = 0.0
        if vs.start_time is not None and vs.time_base is not None:
            start = float(vs.start_time * vs.time_base)
        duration = 0.0
        if vs.duration is not None and vs.time_base is not None:
            duration = float(vs.duration * vs.time_base)
        elif container.duration is not None:
            duration = container.duration / 1_000_000
        return MediaInfo(
            duration_s=duration,
            fps=fps,
            width=int(vs.codec_context.width),
            height=int(vs.codec_context.height),
            has_audio=bool(container.streams.audio),
            start_s=start,
        )


def resize_long_side(image: np.ndarray, max_side: int) -> np.ndarray:
    """Downscale ``image`` so that its long side is at most ``max_side`` (never upscales)."""
    h, w = image.shape[:2]
    long_side = max(h, w)
    if long_side <= max_side:
        return image
    scale = max_side / long_side
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


#: (width, height) of the thumbnail that stillness, motion and lighting are measured on
THUMB_SIZE = (64, 36)
#: thumbnails kept: a few segments' frames of a few sources (~7 KB each)
_THUMBS_KEPT = 512
_thumbs: OrderedDict[int, tuple[weakref.ref[np.ndarray], np.ndarray, np.ndarray]] = OrderedDict()
_thumbs_lock = threading.Lock()


def _thumbs_of(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    key = id(image)
    with _thumbs_lock:
        hit = _thumbs.get(key)
        if hit is not None and hit[0]() is image:
            _thumbs.move_to_end(key)
            return hit[1], hit[2]
    small = cv2.resize(image, THUMB_SIZE, interpolation=cv2.INTER_AREA)
    grey = (cv2.cvtColor(small, cv2.COLOR_BGR2GRAY) if small.ndim == 3 else small).astype(np.float32) / 255.0
    small.flags.writeable = grey.flags.writeable = False
    with _thumbs_lock:
        _thumbs[key] = (weakref.ref(image), small, grey)
        while len(_thumbs) > _THUMBS_KEPT:
            _thumbs.popitem(last=False)
    return small, grey


def thumbnail(image_bgr: np.ndarray) -> np.ndarray:
    """``image_bgr`` resized to :data:`THUMB_SIZE` (``INTER_AREA``; read-only).

    The gateway, the segmenter, the scheduler and the describer each look at every sampled
    frame's thumbnail, so it is made once per image: the last few are kept by object identity
    (a frame's image is never changed in place once sampled).
    """
    return _thumbs_of(image_bgr)[0]


def grey_thumbnail(image_bgr: np.ndarray) -> np.ndarray:
    """The grey :func:`thumbnail` as float32 in [0, 1] (what motion and stillness are measured on)."""
    return _thumbs_of(image_bgr)[1]


def iter_frames(
    path: str | Path,
    sample_fps: float = 4.0,
    start_s: float = 0.0,
    max_side: int = ANALYSIS_MAX_SIDE,
) -> Iterator[Frame]:
    """Yield frames sampled at ``sample_fps`` on an absolute time grid, from ``start_s`` on.

    The first decoded frame at or after each grid time ``k / sample_fps`` is yielded with
    ``index = floor(t * sample_fps)`` (grid slots the video skips are skipped). With ``start_s > 0`` the container seeks to the key frame before it and
    frames before ``start_s`` are skipped, so the output equals the tail of a full decode.
    Frames without a timestamp get one from the frame counter and the stream's rate.

    Raises:
        MediaError: the file is missing, unreadable, or decoding fails part-way.
    """
    if sample_fps <= 0:
        raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
    p = _check_path(path)
    step = 1.0 / sample_fps
    with _open(p) as container:
        vs = _video_stream(container, p)
        vs.thread_type = "AUTO"
        rate = float(vs.average_rate) if vs.average_rate else 25.0
        if start_s > 0 and vs.time_base is not None:
            try:
                container.seek(int(start_s / vs.time_base), stream=vs)
            except av.error.FFmpegError:
                logger.warning("seek to %.2fs failed in %s; decoding from the start", start_s, p)
                container.seek(0, stream=vs)
        next_slot = max(0, math.floor(start_s * sample_fps + _EPS))
        decoded = 0
        last_t = -1.0
        try:
            for frame in container.decode(vs):
                t = frame.time
                if t is None:
                    t = last_t + 1.0 / rate if last_t >= 0 else decoded / rate
                decoded += 1
                last_t = t
                if t < start_s - _EPS or t < next_slot * step - _EPS:
                    continue
                # The index is a function of t alone, so a seek-resumed decode numbers alike.
                slot = math.floor(t * sample_fps + _EPS)
                next_slot = slot + 1
                image = resize_long_side(frame.to_ndarray(format="bgr24"), max_side)
                yield Frame(index=slot, t=float(t), image_bgr=image)
        except av.error.FFmpegError as exc:
            raise MediaError(
                f"decoding {str(p)!r} failed after {decoded} frames ({type(exc).__name__}: {exc}); "
                "the file is probably truncated or corrupt",
                str(p),
            ) from exc
