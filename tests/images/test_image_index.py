"""The index of built images: a record written before image specs named their source still gives the docker
backend somewhere to copy the image from."""

from __future__ import annotations

import json

from evsys.images import ImageService
from evsys.images.storage import Storage
from evsys.records import ImageSpec


def test_an_old_index_record_gets_its_source(tmp_path, monkeypatch):
    storage = Storage(tmp_path)
    layer = tmp_path / "layer"
    layer.mkdir()
    spec = ImageSpec(ref="localhost/evsys/old:1", rootfs_layers=[layer])  # no source, as old records have
    index = tmp_path / "index"
    index.mkdir()
    record = {
        "key": "k1",
        "tag": "localhost/evsys/old:1",
        "image_id": "abc",
        "spec": spec.model_dump(mode="json"),
    }
    (index / "k1.json").write_text(json.dumps(record))
    monkeypatch.setattr(Storage, "find", lambda self, name: {"id": "abc"} if name == "abc" else None)
    cached = ImageService(storage)._cached("k1")
    assert cached is not None
    assert cached.spec.source == storage.transport("localhost/evsys/old:1")
