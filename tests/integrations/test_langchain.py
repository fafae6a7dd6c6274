"""VecbridgeEmbeddings with the real LangChain: an application's index built by the old model answers queries
embedded by the new model through an alignment (the ids ``search --wrap`` finds), and an upgrade's stage, moved by
a separate ``vecbridge upgrade`` process, decides the space while the embeddings object lives. The vectors are bit
for bit the core's (:func:`translate_queries` of the model's own)."""
from __future__ import annotations

import asyncio
import importlib
import sys

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from tests.embedding_spaces import NEW, against_wrap, move, same_bits, sample_alignment, start_upgrade, upgrade_vectors
from vecbridge.align import Alignment
from vecbridge.errors import MissingDependency
from vecbridge.integrations.langchain import VecbridgeEmbeddings
from vecbridge.sample import recorded_new_model
from vecbridge.serving.embedder import SpaceEmbedder
from vecbridge.serving.translate import translate_queries

pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


@pytest.fixture(scope="module")
def align_file(tmp_path_factory, sample):
    return sample_alignment(tmp_path_factory.mktemp("align"), sample)


def test_an_index_built_by_the_old_model_answers_new_model_queries(tmp_path, align_file, sample):
    """The application's InMemoryVectorStore was filled by the old model; it swaps its embeddings for the new model
    through the alignment and keeps the index: the same hits as ``search --wrap`` over the same old vectors."""
    store = InMemoryVectorStore(VecbridgeEmbeddings("tests.embedders:minilm_lookup"))
    store.add_texts([it["doc"] for it in sample.items], ids=sample.ids)
    emb = VecbridgeEmbeddings(NEW, alignment=align_file)
    assert isinstance(emb, Embeddings)
    store.embedding = emb

    rows = sample.query_rows[:40]   # the in-memory store scores every record per query, in Python
    texts = [sample.items[r]["query"] for r in rows]
    hits = [[d.id for d in store.similarity_search(t, k=10)] for t in texts]
    recall, recall_wrap, same = against_wrap(tmp_path, sample, align_file, rows, hits)
    assert recall > 0.5 and abs(recall - recall_wrap) <= 0.025 and same >= 0.95


def test_vectors_are_the_cores_bit_for_bit(align_file, sample):
    texts = [sample.items[r]["query"] for r in sample.query_rows[:32]]
    emb = VecbridgeEmbeddings(NEW, alignment=align_file)
    expected = translate_queries(Alignment.load(align_file), recorded_new_model(texts), "cosine")
    assert same_bits(emb.embed_documents(texts), expected)
    one = translate_queries(Alignment.load(align_file), recorded_new_model(texts[:1]), "cosine")[0]
    assert same_bits(emb.embed_query(texts[0]), one)
    assert same_bits(asyncio.run(emb.aembed_documents(texts)), expected)
    assert same_bits(asyncio.run(emb.aembed_query(texts[0])), one)
    assert emb.space()["space"] == "old" and emb.space()["dim"] == 384
    core = SpaceEmbedder(NEW)
    assert VecbridgeEmbeddings(embedder=core).embedder is core


def test_the_upgrade_stage_decides_the_space_while_the_object_lives(tmp_path, sample):
    state = start_upgrade(tmp_path, sample)
    emb = VecbridgeEmbeddings(upgrade=state)
    texts = [it["doc"] for it in sample.items[:20]]
    native, translated, _ = upgrade_vectors(state, texts)
    assert same_bits(emb.embed_documents(texts), translated)
    assert emb.space()["stage"] == "mapped"
    move(state, "cutover")
    assert same_bits(emb.embed_documents(texts), native)
    assert emb.embed_query(texts[0]) == native[0].tolist()
    move(state, "rollback")
    assert same_bits(emb.embed_documents(texts), translated)
    assert emb.space()["space"] == "old"


def test_without_langchain_the_import_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    monkeypatch.setitem(sys.modules, "langchain_core.embeddings", None)
    monkeypatch.delitem(sys.modules, "vecbridge.integrations.langchain")
    with pytest.raises(MissingDependency) as err:
        importlib.import_module("vecbridge.integrations.langchain")
    assert str(err.value) == 'the LangChain integration needs langchain-core: pip install "vecbridge[langchain]"'
    monkeypatch.delitem(sys.modules, "vecbridge.integrations.langchain", raising=False)
