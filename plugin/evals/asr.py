"""``reflectworld eval asr FOLDER``: word error rate of the local speech-to-text.

FOLDER holds audio (or video) files and ``transcripts.json`` mapping each file name to its
reference text. Every listed file is decoded to 16 kHz mono, transcribed with the packaged
Whisper tiny.en (extra ``asr``) in one call, or with ``--turns`` as ingestion hears it (its speech
turns packed into Whisper windows), and compared after normalisation (lower case, punctuation
removed, numbers spelled out). The reported WER is corpus-level: total word edits / total reference words.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path

from plugin.errors import PluginError
from plugin.progress import eval_progress

__all__ = ["add_parser", "evaluate"]

logger = logging.getLogger(__name__)


def _as_ingested(asr: object, path: Path) -> str:
    """The words ingestion hears in a file: its speech turns (Silero VAD) packed into Whisper windows."""
    from functools import lru_cache, partial

    from perception.detectors.asr import TurnTranscripts
    from perception.media.audio import SileroVAD, decode_audio, scan_audio

    intervals = scan_audio(path, SileroVAD()).intervals
    turns = TurnTranscripts(asr, intervals, lru_cache(maxsize=32)(partial(decode_audio, path)))  # type: ignore[arg-type]
    return turns.span(0.0, intervals[-1][1] + 1.0).text if intervals else ""


def evaluate(folder: Path, progress: Callable[[int, int], None] | None = None, turns: bool = False) -> dict[str, object]:
    """Transcribe every file of ``folder/transcripts.json``; return wer, n and per-file rows.

    ``progress(done, total)`` is called after each file. With ``turns`` each file is heard as
    ingestion hears it (speech turns packed into Whisper windows) instead of in one call.

    Raises:
        PluginError: the folder or its transcripts.json is missing/invalid, or ASR is unavailable.
    """
    from perception.detectors.asr import WhisperTranscriber, load_audio, word_error_rate

    index = folder / "transcripts.json"
    if not index.is_file():
        raise PluginError(f"{index} not found; write a JSON object mapping file names in {folder} to reference text")
    try:
        references = json.loads(index.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PluginError(f"{index} is not valid JSON ({exc}); fix it") from None
    if not isinstance(references, dict) or not references:
        raise PluginError(f"{index} must be a non-empty object {{\"file.wav\": \"reference text\"}}")
    asr = WhisperTranscriber()
    if not asr.available:
        raise PluginError("speech-to-text is unavailable; pip install 'reflectworld-mm[asr]'")
    edits = words = 0
    rows: list[dict[str, object]] = []
    for name, reference in sorted(references.items()):
        path = folder / name
        if not path.is_file():
            raise PluginError(f"{path} is listed in transcripts.json but missing; add it or remove the entry")
        hypothesis = _as_ingested(asr, path) if turns else asr.transcribe(load_audio(path)).text
        e, n = word_error_rate(str(reference), hypothesis)
        edits, words = edits + e, words + n
        rows.append({"file": name, "wer": round(e / max(n, 1), 4), "hypothesis": hypothesis})
        if progress is not None:
            progress(len(rows), len(references))
    return {"wer": round(edits / max(words, 1), 4), "n": len(rows), "files": rows}


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _out

    result = evaluate(Path(args.folder), progress=eval_progress("asr", "file(s)"), turns=args.turns)
    if args.json:
        _out(json.dumps({"wer": result["wer"], "n": result["n"]}))
        return 0
    how = "speech turns (Silero VAD) packed into Whisper windows, as ingested" if args.turns else "one call"
    _out(f"protocol: each file → 16 kHz mono → Whisper tiny.en (beam search of 5, {how}) → normalised words (numbers "
         "spelled out); WER = edits / ref words")
    for row in result["files"]:  # type: ignore[attr-defined]
        _out(f"  {row['wer']:6.3f}  {row['file']}: {row['hypothesis']}")
    _out(f"WER {result['wer']:.4f} over {result['n']} file(s)")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval asr``."""
    p = sub.add_parser("asr", help="word error rate of speech-to-text against FOLDER/transcripts.json")
    p.add_argument("folder", help="folder with audio files and transcripts.json (file name → reference text)")
    p.add_argument("--json", action="store_true", help='print one JSON object {"wer", "n"}')
    p.add_argument("--turns", action="store_true",
                   help="hear each file as ingestion does (its speech turns packed into Whisper windows)")
    p.set_defaults(func=_run)
