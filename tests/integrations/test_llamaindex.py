"""VecbridgeEmbedding with the real LlamaIndex: a VectorStoreIndex built by the old model retrieves with queries
embedded by the new model through an alignment (the ids ``search --wrap`` finds), and an upgrade's stage, moved by a
separate ``vecbridge upgrade`` process, decides the space while the model object lives. The vectors are bit for bit
the core's (:func:`translate_queries` of the model's own)."""
from __future__ import annotations

import asyncio
import importlib
import sys

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import TextNode

from tests.embedding_spaces import NEW, against_wrap, move, same_bits, sample_alignment, start_upgrade, upgrade_vectors
from vecbridge.align import Alignment
from vecbridge.errors import MissingDependency
from vecbridge.integrations.llamaindex import VecbridgeEmbedding
from vecbridge.sample import recorded_new_model
from vecbridge.serving.translate import translate_queries

pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


@pytest.fixture(scope="module")
def align_file(tmp_path_factory, sample):
    return sample_alignment(tmp_path_factory.mktemp("align"), sample)


def test_an_index_built_by_the_old_model_retrieves_with_new_model_queries(tmp_path, align_file, sample):
    nodes = [TextNode(id_=i, text=it["doc"]) for i, it in zip(sample.ids, sample.items)]
    index = VectorStoreIndex(nodes, embed_model=VecbridgeEmbedding("tests.embedders:minilm_lookup"))
    emb = VecbridgeEmbedding(NEW, alignment=align_file)
    assert isinstance(emb, BaseEmbedding)
    retriever = index.as_retriever(similarity_top_k=10, embed_model=emb)

    rows = sample.query_rows[:50]
    texts = [sample.items[r]["query"] for r in rows]
    hits = [[n.node.node_id for n in retriever.retrieve(t)] for t in texts]
    recall, recall_wrap, same = against_wrap(tmp_path, sample, align_file, rows, hits)
    assert recall > 0.5 and abs(recall - recall_wrap) <= 0.02 and same >= 0.95


def test_vectors_are_the_cores_bit_for_bit(align_file, sample):
    texts = [sample.items[r]["query"] for r in sample.query_rows[:32]]
    emb = VecbridgeEmbedding(NEW, alignment=align_file, embed_batch_size=8)
    alignment = Alignment.load(align_file)

    def core(batch):
        return translate_queries(alignment, recorded_new_model(batch), "cosine")

    batched = np.concatenate([core(texts[i:i + 8]) for i in range(0, 32, 8)])
    assert same_bits(emb.get_text_embedding_batch(texts), batched)
    assert same_bits(emb.get_query_embedding(texts[0]), core(texts[:1])[0])
    assert same_bits(emb.get_text_embedding(texts[1]), core(texts[1:2])[0])
    assert same_bits(asyncio.run(emb.aget_query_embedding(texts[0])), core(texts[:1])[0])
    assert same_bits(asyncio.run(emb.aget_text_embedding_batch(texts)), batched)
    assert emb.model_name == NEW and emb.embed_batch_size == 8
    assert emb.space()["space"] == "old" and emb.space()["alignment"] == alignment.fingerprint


def test_the_upgrade_stage_decides_the_space_while_the_object_lives(tmp_path, sample):
    state = start_upgrade(tmp_path, sample)
    emb = VecbridgeEmbedding(upgrade=state)
    texts = [it["doc"] for it in sample.items[:10]]
    native, translated, _ = upgrade_vectors(state, texts)
    assert same_bits(emb.get_text_embedding_batch(texts), translated)
    move(state, "cutover")
    assert same_bits(emb.get_text_embedding_batch(texts), native)
    assert emb.get_query_embedding(texts[0]) == native[0].tolist()
    move(state, "rollback")
    assert same_bits(emb.get_text_embedding_batch(texts), translated)
    assert emb.space()["stage"] == "rolled-back"


def test_without_llamaindex_the_import_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "llama_index" or m.startswith("llama_index.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "vecbridge.integrations.llamaindex")
    with pytest.raises(MissingDependency) as err:
        importlib.import_module("vecbridge.integrations.llamaindex")
    assert str(err.value) == ('the LlamaIndex integration needs llama-index-core: pip install '
                              '"vecbridge[llamaindex]"')
