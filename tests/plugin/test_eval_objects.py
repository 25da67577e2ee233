"""``reflectworld eval objects``: label formats, IoU scoring, and the command on the repository's photographs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plugin.cli import main
from plugin.errors import PluginError
from plugin.evals.object_labels import Counts, load_folder, score_image

DATA = Path(__file__).resolve().parents[1] / "data"


def _labelme(shapes: list[dict[str, object]], image: str = "room.png") -> dict[str, object]:
    return {"version": "5.1.1", "flags": {}, "shapes": shapes, "imagePath": image, "imageHeight": 300,
            "imageWidth": 451}


def test_the_three_label_forms_are_read_with_voc_names_groups_and_ignored_regions(tmp_path: Path) -> None:
    for name in ("room.png", "cat.png", "cup.png"):
        shutil.copy(DATA / "images" / "chelsea.png", tmp_path / name)
    (tmp_path / "room.json").write_text(json.dumps(_labelme([
        {"label": "sofa", "group_id": 0, "shape_type": "polygon", "points": [[10, 100], [60, 120], [40, 200]]},
        {"label": "sofa", "group_id": 0, "shape_type": "polygon", "points": [[300, 150], [380, 160], [350, 220]]},
        {"label": "person", "group_id": None, "shape_type": "rectangle", "points": [[100, 20], [200, 280]]},
        {"label": "__ignore__", "group_id": None, "shape_type": "rectangle", "points": [[0, 0], [50, 50]]},
        {"label": "person", "group_id": None, "shape_type": "point", "points": [[5, 5]]}])), encoding="utf-8")
    (tmp_path / "cat.json").write_text(json.dumps([{"label": "Cat", "box": [0, 0, 400, 300]},
                                                   {"label": "bed", "box": [0, 0, 451, 300], "ignore": True}]))
    (tmp_path / "annotations.json").write_text(json.dumps({
        "images": [{"id": 7, "file_name": "cup.png"}], "categories": [{"id": 47, "name": "cup"}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 47, "bbox": [170, 15, 250, 290]}]}))
    images = {im.name: im for im in load_folder(tmp_path)}
    assert set(images) == {"room.png", "cat.png", "cup.png"}
    room = images["room.png"]
    assert sorted(room.boxes) == [("couch", (10.0, 100.0, 380.0, 220.0)), ("person", (100.0, 20.0, 200.0, 280.0))]
    assert room.ignore == [(None, (0.0, 0.0, 50.0, 50.0))]
    assert images["cat.png"].boxes == [("cat", (0.0, 0.0, 400.0, 300.0))]
    assert images["cat.png"].ignore == [("bed", (0.0, 0.0, 451.0, 300.0))]
    assert images["cup.png"].boxes == [("cup", (170.0, 15.0, 420.0, 305.0))]


def test_detections_are_scored_at_iou_half_with_confusions_and_ignored_regions(tmp_path: Path) -> None:
    shutil.copy(DATA / "images" / "chelsea.png", tmp_path / "a.png")
    (tmp_path / "a.json").write_text(json.dumps([
        {"label": "cat", "box": [0, 0, 400, 300]}, {"label": "person", "box": [400, 0, 450, 100]},
        {"ignore": True, "box": [300, 200, 451, 300]}]))
    image = load_folder(tmp_path)[0]
    counts: dict[str, Counts] = {}
    confusions: dict[str, int] = {}
    detections = [("dog", 0.5, (5.0, 5.0, 395.0, 295.0)),  # the cat, named dog
                  ("cat", 0.4, (20.0, 20.0, 380.0, 290.0)),  # the cat: IoU 0.81
                  ("cat", 0.3, (0.0, 0.0, 400.0, 300.0)),  # a duplicate of it
                  ("cup", 0.6, (350.0, 250.0, 440.0, 290.0)),  # inside the ignored region
                  ("person", 0.9, (0.0, 0.0, 40.0, 40.0))]  # nowhere near the person
    score_image(image, detections, {"cat", "dog", "cup", "person"}, counts, confusions)
    assert {k: (c.tp, c.fp, c.fn) for k, c in counts.items()} == {"dog": (0, 1, 0), "cat": (1, 1, 0),
                                                                  "person": (0, 1, 1)}
    assert confusions == {"cat → dog": 1}


@pytest.mark.parametrize(("content", "message"), [
    ([{"label": "cat", "box": [10, 10, 5, 50]}], "is empty"),
    ([{"label": "cat"}], "write"),
    ("{not json", "cannot read labels"),
])
def test_bad_labels_say_what_to_fix(tmp_path: Path, content: object, message: str) -> None:
    shutil.copy(DATA / "images" / "chelsea.png", tmp_path / "a.png")
    (tmp_path / "a.json").write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(PluginError, match=message):
        load_folder(tmp_path)


def test_a_folder_without_labels_or_with_a_missing_image_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="no box labels"):
        load_folder(tmp_path)
    (tmp_path / "annotations.json").write_text(json.dumps({"images": [{"id": 1, "file_name": "gone.png"}],
                                                          "categories": [], "annotations": []}))
    with pytest.raises(PluginError, match="labelled but missing"):
        load_folder(tmp_path)
    assert main(["eval", "objects", str(tmp_path / "nowhere")]) != 0


def test_eval_objects_on_the_repository_photographs_names_them_as_stills_and_as_a_clip(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "objects", str(DATA / "objects"), "--seconds", "3", "--size", "960x540", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {row["image"]: row for row in result["images"]}
    assert set(rows) == {"astronaut.png", "chelsea.png", "coffee.png", "camera.png"}
    stills, clip = result["stills"], result["clip"]
    assert stills["per_class"]["person"]["recall"] == 1.0  # the astronaut and the cameraman
    assert stills["per_class"]["cat"]["tp"] == 1 and not any(k.startswith("cat →") for k in stills["confusions"])
    assert "dog" not in rows["chelsea.png"]["stills"] and rows["chelsea.png"]["scores"]["cat"] >= 0.35
    # shown as a clip through segmentation, scheduling and key frames, each photograph's main object comes out
    assert "cat" in rows["chelsea.png"]["clip"] and "dog" not in rows["chelsea.png"]["clip"]
    assert "person" in rows["astronaut.png"]["clip"] and "cup" in rows["coffee.png"]["clip"]
    assert clip["per_class"]["person"]["recall"] == 1.0 and clip["recall"] >= 0.75
    assert stills["precision"] >= 0.6 and clip["segments"] >= 4


def test_a_photograph_the_coco_model_is_unsure_of_still_yields_its_cat_as_a_still_and_as_a_clip(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(DATA / "images" / "chelsea.png", folder / "chelsea.png")
    (folder / "chelsea.json").write_text(json.dumps([{"label": "cat", "box": [0, 0, 451, 300]}]))
    manifest = tmp_path / "manifest.yaml"  # CenterNet's own cat (about 0.5) falls under this threshold
    manifest.write_text("perception:\n  objects:\n    type: coco\n    threshold: 0.9\n", encoding="utf-8")
    assert main(["eval", "objects", str(folder), "--manifest", str(manifest), "--seconds", "2", "--size", "452x300",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["images"][0]
    assert row["stills"] == ["cat"] and row["clip"] == ["cat"]  # the household SSD's cat, through ingest too
