"""Search cards (``memory/search/cards.py``): written with every row, filled in for older stores, kept current
by identity edits, and read by the search in place of a dozen columns."""

from __future__ import annotations

import json
from pathlib import Path

from memory_fixtures import populate

from memory import HashEmbedder, MemoryStore
from memory.search.cards import CARD_COLUMN, CARD_COLUMNS, card_json, read_card
from memory.identity.identity_ops import forget_entity, merge_entities
from memory.store.schema import META_TABLE, SCHEMA_VERSION


def cards_match_rows(store: MemoryStore) -> int:
    """Assert every carded row's card says what its columns say; return how many rows were checked."""
    checked = 0
    for level, columns in CARD_COLUMNS.items():
        for row in store.scan_rows(level):
            assert read_card(row[CARD_COLUMN]) == {c: row[c] for c in columns}, (level, row["id"])
            checked += 1
    return checked


def test_every_written_row_carries_its_card_and_identity_edits_rewrite_it(tmp_path: Path) -> None:
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64)) as store:
        populate(store)
        assert cards_match_rows(store) > 6
        merge_entities(store, "person_0002", "person_0001")  # traces and observations change owner
        assert cards_match_rows(store)
        assert all("person_0002" not in read_card(r[CARD_COLUMN])["entity_ids"] for r in store.scan_rows("traces"))
        forget_entity(store, "person_0001")
        assert cards_match_rows(store)
        hit = store.search("red scarf", limit=1)[0]
        assert CARD_COLUMN not in store.get(hit.id).item  # the card is the store's, not the caller's


def test_a_version_7_store_gets_cards_filled_in_by_the_migration(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    with MemoryStore(path, HashEmbedder(64)) as store:
        populate(store)
        expected = {r["id"]: read_card(r[CARD_COLUMN]) for r in store.scan_rows("traces")}
        before = [h.id for h in store.search("woman with a red scarf", limit=5)]
        for level in CARD_COLUMNS:  # as a version-7 store wrote them
            store._db.open_table(level).drop_columns([CARD_COLUMN])
        MemoryStore._set_meta(store._db.open_table(META_TABLE), {"schema_version": "7"})
    with MemoryStore(path, HashEmbedder(64)) as store:
        meta = {r["key"]: r["value"] for r in store._db.open_table(META_TABLE).search().limit(None).to_list()}
        assert meta["schema_version"] == str(SCHEMA_VERSION)
        assert {r["id"]: read_card(r[CARD_COLUMN]) for r in store.scan_rows("traces")} == expected
        assert cards_match_rows(store)
        assert [h.id for h in store.search("woman with a red scarf", limit=5)] == before


def test_a_version_8_store_gets_cards_with_quotes_so_a_whole_sentence_ranks_as_speech(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    with MemoryStore(path, HashEmbedder(64)) as store:
        populate(store)
        row = next(iter(store.scan_rows("traces")))
        table = store._db.open_table("traces")
        table.update(where=f"id = '{row['id']}'", values={"quotes": ["Ask not what your country can do for you."]})
        old = {c: r[c] for r in table.search().limit(None).to_list() for c in [CARD_COLUMN] if r["id"] == row["id"]}
        card = read_card(old[CARD_COLUMN]) or {}
        card.pop("quotes", None)  # as a version-8 store wrote it
        table.update(where=f"id = '{row['id']}'", values={CARD_COLUMN: json.dumps(card)})
        MemoryStore._set_meta(store._db.open_table(META_TABLE), {"schema_version": "8"})
    with MemoryStore(path, HashEmbedder(64)) as store:
        assert cards_match_rows(store)
        card = next(read_card(r[CARD_COLUMN]) for r in store.scan_rows("traces") if r["id"] == row["id"])
        assert card["quotes"] == ["Ask not what your country can do for you."]


def test_a_row_without_a_usable_card_is_read_from_its_columns(tmp_path: Path) -> None:
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64)) as store:
        populate(store)
        before = store.search("woman with a red scarf", limit=3)
        table = store._table("traces")
        table.update(where=f"id = '{before[0].id}'", values={CARD_COLUMN: "{not json"})
        table.update(where=f"id = '{before[1].id}'", values={CARD_COLUMN: None})
        assert store.search("woman with a red scarf", limit=3) == before


def test_cards_are_compact_json_of_their_columns() -> None:
    row = {"id": "trc_1", "text": 'he said "hi"\n', "objects": ["cup"], "segment_index": 3, "t_start": 1.5,
           "extra": "not carded"}
    card = card_json("traces", row)
    assert json.loads(card)["text"] == 'he said "hi"\n' and "extra" not in card and ", " not in card
    assert read_card(card)["segment_index"] == 3 and read_card(None) is None and read_card("[1]") is None
