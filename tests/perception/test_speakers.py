"""Who spoke: diarization (real ONNX models) on real recordings, DER against RTTM references, voices tied to faces.

Media: ``tests/data/diarization`` — stereo_mix.wav (two overlapping speakers, each channel the
reference) and grid_dialogue.mp4 (GRID talking heads: speaker A, B, then A again).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import numpy as np
import pytest
from mcp import Client

from perception.detectors.asr import load_audio
from perception.detectors.speakers import Diarizer, SpeakerEmbedder, TurnDiarization, cluster
from memory.identity.identity_ops import entity_decisions
from plugin.cli import main
from plugin.evals.diarization import der, read_rttm
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import DATA, engine_for, write_manifest
from tests.media import write_av

pytestmark = pytest.mark.slow
DIAR = DATA / "diarization"
PERCEPTION = {"ocr": {"type": "none"}, "max_segment_s": 4.0}


def test_der_is_zero_for_the_reference_under_any_labels_and_counts_confusion() -> None:
    ref = [(0.0, 2.0, "a"), (2.0, 4.0, "b")]
    assert der(ref, [(0.0, 2.0, "x"), (2.0, 4.0, "y")])["der"] == 0.0
    one = der(ref, [(0.0, 4.0, "x")])
    assert one["der"] == pytest.approx(0.5, abs=0.01) and one["confusion_s"] == pytest.approx(2.0, abs=0.02)
    missed = der(ref, [(0.0, 2.0, "x")])
    assert missed["missed_s"] == pytest.approx(2.0, abs=0.02) and missed["false_alarm_s"] == 0.0


def test_clustering_never_merges_two_speakers_of_one_window() -> None:
    v = np.ones(4, np.float32) / 2
    assert cluster([v, v, v], 0.5, groups=[0, 0, 1]) == [0, 1, 0]


def test_two_overlapping_speakers_are_found_with_low_der() -> None:
    result = Diarizer().diarize(load_audio(DIAR / "stereo_mix.wav"))
    assert len(result.speakers) == 2
    hyp = [(t.start, t.end, str(t.speaker)) for t in result.turns]
    assert der(read_rttm(DIAR / "stereo_mix.rttm"), hyp)["der"] < 0.2


@pytest.mark.parametrize("clips, speakers", [
    (("jfk.flac", "sense_and_sensibility_01_austen_64kb-0870.wav"), 2),  # the 10 s window cuts JFK's last words off
    (("grid_bbaf2n.mpg", "grid_brbk7n.mpg", "grid_lbax4n.mpg"), 3),  # three people taking turns in one window
    (("grid_bbaf2n.mpg", "grid_brbk7n.mpg", "grid_bbaf2n.mpg", "grid_brbk7n.mpg"), 2),  # two, alternating
])
def test_speakers_taking_turns_are_counted_right(clips: tuple[str, ...], speakers: int) -> None:
    pause = np.zeros(4800, np.float32)
    audio = np.concatenate([part for name in clips for part in (load_audio(DATA / name), pause)])
    result = Diarizer().diarize(audio)
    assert len(result.speakers) == speakers, result.seconds
    order = [t.speaker for t in result.turns]
    assert len({order[0], order[-1]}) == (1 if clips[0] == clips[-1] else 2)


def test_eval_diarization_prints_der_and_speaker_count_accuracy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "diarization", str(DIAR), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["n"] == 2 and out["speaker_count_accuracy"] == 1.0 and out["der"] < 0.15


def test_different_grid_speakers_stay_apart_and_one_speaker_matches_themself() -> None:
    embed = SpeakerEmbedder()
    a1 = embed.embed(load_audio(DATA / "grid_bbaf2n.mpg"))
    b = embed.embed(load_audio(DATA / "grid_brbk7n.mpg"))
    audio = load_audio(DATA / "grid_bbaf2n.mpg")
    a_half = embed.embed(audio[len(audio) // 3:])
    assert a1 is not None and b is not None and a_half is not None
    assert float(a1 @ a_half) >= 0.65 > float(a1 @ b)


def test_a_file_is_diarized_once_per_turn_and_each_segment_gets_its_share() -> None:
    audio = load_audio(DIAR / "grid_dialogue.mp4")  # A 0.99–2.14 s, B 3.52–5.12 s, A 6.95–8.10 s
    reads: list[tuple[float, float]] = []

    def read(lo: float, hi: float) -> np.ndarray:
        reads.append((lo, hi))
        return audio[int(lo * 16000):int(hi * 16000)]

    voices = TurnDiarization(Diarizer(), [(0.95, 2.2), (3.5, 5.2), (6.9, 8.2)], read)
    first, rest = voices.span(0.0, 1.6), voices.span(1.6, 3.0)
    b, a_again = voices.span(3.0, 6.0), voices.span(6.0, 9.0)
    assert len(reads) == 1  # three turns under 5 s apart: one window, one diarization
    for part, (lo, hi) in ((first, (0.0, 1.6)), (rest, (1.6, 3.0)), (b, (3.0, 6.0)), (a_again, (6.0, 9.0))):
        assert len(part.speakers) == 1 and all(lo <= t.start < t.end <= hi for t in part.turns)
        assert sum(part.seconds.values()) <= hi - lo
    same = float(first.embeddings[first.speakers[0]] @ a_again.embeddings[a_again.speakers[0]])
    other = float(first.embeddings[first.speakers[0]] @ b.embeddings[b.speakers[0]])
    assert same >= 0.65 > other
    assert voices.span(2.0, 2.3).turns == []  # under half a second of A: not a voice of that segment


@pytest.fixture(scope="module")
def dialogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("dialogue")
    shutil.copy(DIAR / "grid_dialogue.mp4", directory / "dialogue.mp4")
    with engine_for(directory, perception=PERCEPTION, semantic={"enabled": False}) as engine:
        engine.ingest_file(directory / "dialogue.mp4", "studio")
    return directory


def _traces(directory: Path, perception: dict[str, object] = PERCEPTION) -> tuple[list, list]:
    with engine_for(directory, perception=perception, semantic={"enabled": False}) as engine:
        return engine.store.timeline(), engine.store.voice_gallery()


def test_transcripts_carry_the_speaker_tied_to_the_face_on_screen(dialogue: Path) -> None:
    traces, voices = _traces(dialogue)
    spoken = [t for t in traces if t.speakers]
    assert len(spoken) >= 3
    for t in spoken:  # the person speaking is the one whose face is on screen
        assert t.speakers == [t.entity_ids[0]] and t.transcript.startswith(f"{t.entity_ids[0]}: ")
    a_first = next(t for t in spoken if t.t_start < 3.0)
    b = next(t for t in spoken if 3.0 <= t.t_start < 6.0)
    a_again = next(t for t in spoken if t.t_start >= 6.0)
    assert a_first.speakers == a_again.speakers != b.speakers
    # Only words tiny.en hears with a margin (word probability >= 0.95 here, stable when the audio is
    # shifted and dithered): "bin blue" comes out as "bimblue", "bimblu" or "bimbleu" depending on the
    # CPU's int8 kernels and "k seven" as "K7" or "case 7", so neither is asserted.
    for t in (a_first, b, a_again):
        assert "now" in t.transcript.lower(), t.transcript
    assert "by" in b.transcript.lower().split(), b.transcript
    # each sentence lies whole inside the segment that carries it (reference turns: A 0.99-2.14 s, B 3.52-5.12 s):
    # no word of it is left in the silent segment before or after its turn
    assert all(t.speakers for t in traces if t.transcript), [(t.t_start, t.transcript) for t in traces]
    assert a_first.t_start <= 0.99 + 0.1 and a_first.t_end >= 2.14
    assert b.t_start <= 3.52 + 0.1 and b.t_end >= 5.12
    assert {v.entity_id for v in voices} == {a_first.speakers[0], b.speakers[0]}


def test_memory_get_and_search_show_who_said_what(dialogue: Path) -> None:
    traces, _ = _traces(dialogue)
    b = next(t for t in traces if t.speakers and 3.0 <= t.t_start < 6.0)

    async def run() -> tuple[dict, dict]:
        manifest = load_manifest(write_manifest(dialogue, perception=PERCEPTION))
        async with Client(create_server(manifest), raise_exceptions=True) as client:
            got = await client.call_tool("memory_get", {"id": b.id})
            words = b.transcript.split(": ", 1)[1]
            hits = await client.call_tool("memory_search", {"query": f"{b.speakers[0]} {words}", "level": "traces"})
            obs = await client.call_tool("entity_get", {"entity_id": b.speakers[0]})
            return got.structured_content, {"hits": hits.structured_content, "obs": obs.structured_content}

    got, rest = anyio.run(run)
    assert got["item"]["speakers"] == b.speakers and got["item"]["transcript"] == b.transcript
    assert rest["hits"]["hits"][0]["id"] == b.id
    assert any("Said:" in o["text"] for o in rest["obs"]["observations"])
    assert any(d["action"] == "voice_link" for d in rest["obs"]["decisions"])


def test_a_voice_without_a_face_never_creates_an_entity(tmp_path: Path) -> None:
    shutil.copy(DIAR / "grid_dialogue.mp4", tmp_path / "dialogue.mp4")
    blind = {**PERCEPTION, "faces": {"type": "none"}}
    with engine_for(tmp_path, perception=blind, semantic={"enabled": False}) as engine:
        engine.ingest_file(tmp_path / "dialogue.mp4", "studio")
        assert engine.store.list_entities(kind="person") == []
        speakers = [t.speakers for t in engine.store.timeline() if t.speakers]
    assert speakers[0] == speakers[-1] != speakers[1]  # A, B, A again: tracked within the source
    assert all(s[0].startswith("voice_") for s in speakers)


def test_an_enrolled_voice_names_its_speaker_without_a_face(tmp_path: Path) -> None:
    shutil.copy(DIAR / "grid_dialogue.mp4", tmp_path / "dialogue.mp4")
    blind = {**PERCEPTION, "faces": {"type": "none"}}
    sample = tmp_path / "samples" / "bea.mpg"
    sample.parent.mkdir()
    shutil.copy(DATA / "grid_brbk7n.mpg", sample)
    manifest = load_manifest(write_manifest(tmp_path, perception=blind, semantic={"enabled": False},
                                            access={"roots": [str(sample.parent)]}))

    async def enrol() -> tuple[dict, bool]:
        async with Client(create_server(manifest)) as client:
            outside = await client.call_tool("entity_update", {  # not below an allowed root: refused
                "action": "name", "name": "Bea", "audio_path": str(DATA / "grid_brbk7n.mpg")})
            result = await client.call_tool("entity_update", {"action": "name", "name": "Bea",
                                                               "audio_path": str(sample)})
            return result.structured_content, outside.is_error

    enrolled, refused = anyio.run(enrol)
    assert refused
    enrolled = enrolled["entity"]
    assert enrolled["name"] == "Bea" and enrolled["kind"] == "person"
    with engine_for(tmp_path, perception=blind, semantic={"enabled": False}) as engine:
        engine.ingest_file(tmp_path / "dialogue.mp4", "studio")
        traces = [t for t in engine.store.timeline() if t.speakers]
    b = next(t for t in traces if 3.0 <= t.t_start < 6.0)
    assert b.speakers == [enrolled["id"]] and b.transcript.startswith(f"Bea ({enrolled['id']}): ")
    assert enrolled["id"] in b.entity_ids
    assert all(enrolled["id"] not in t.speakers for t in traces if t.t_start < 3.0 or t.t_start >= 6.0)


def _two_faces(path: Path) -> Path:
    """GRID A and B side by side: first A talks (B frozen), then B talks (A frozen), each with their own audio."""
    import av

    def frames(p: Path) -> list[np.ndarray]:
        with av.open(str(p)) as c:
            return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]

    a, b = frames(DATA / "grid_bbaf2n.mpg"), frames(DATA / "grid_brbk7n.mpg")
    audio = np.concatenate([load_audio(DATA / "grid_bbaf2n.mpg")[:len(a) * 640],
                            load_audio(DATA / "grid_brbk7n.mpg")[:len(b) * 640]])
    video = [np.hstack([fa, b[0]]) for fa in a] + [np.hstack([a[-1], fb]) for fb in b]
    return write_av(path, video, audio, fps=25, rate=16000, options={"crf": "23", "preset": "veryfast"})


def test_with_two_faces_on_screen_the_voice_goes_to_the_face_whose_mouth_moves(tmp_path: Path) -> None:
    import json

    _two_faces(tmp_path / "two.mp4")
    with engine_for(tmp_path, perception=PERCEPTION, semantic={"enabled": False}) as engine:
        engine.ingest_file(tmp_path / "two.mp4", "studio")
        traces = [t for t in engine.store.timeline() if t.speakers]
        decisions = engine.store.scan_rows("identity_decisions")

    def left_of(trace_index: int, entity: str) -> bool:  # where that entity's face is in the segment
        rows = [r for r in decisions if r["segment_index"] == trace_index and r["entity_id"] == entity
                and r["action"] in ("new", "match", "confirm_pending")]
        return json.loads(rows[0]["evidence_json"])[0]["box"][0] < 360

    first, second = traces[0], traces[-1]
    assert len(first.entity_ids) == 2 and first.t_end <= 3.6 and second.t_start >= 3.0  # A's words, then B's
    assert left_of(first.segment_index, first.speakers[0])  # A talks on the left
    assert not left_of(second.segment_index, second.speakers[0])  # then B on the right
    links = [r for r in decisions if r["action"] == "voice_link"]
    assert len(links) == 2 and all("mouth moved" in r["reason"] for r in links)


def test_a_face_seen_only_in_profile_does_not_claim_the_voice_heard_over_it(tmp_path: Path) -> None:
    """Hamilton: the singer is heard over a close profile of the pianist, then seen singing."""
    shutil.copy(DATA / "short_hamilton_clip.mp4", tmp_path / "stage.mp4")
    with engine_for(tmp_path, perception={"ocr": {"type": "none"}, "asr": {"type": "none"}},
                    semantic={"enabled": False}) as engine:
        engine.ingest_file(tmp_path / "stage.mp4", "stage")
        traces = engine.store.timeline(camera="stage")
        pianist = {e for t in traces if 1.3 <= t.t_start < 2.6 for e in t.entity_ids}
        links = [d for e in {e for t in traces for e in t.entity_ids}
                 for d in entity_decisions(engine.store, e, limit=100) if d.action == "voice_link"]
    assert pianist and links
    assert not any(d.entity_id in pianist and d.segment_index <= 2 for d in links), \
        [(d.entity_id, d.segment_index, d.evidence_json) for d in links]
