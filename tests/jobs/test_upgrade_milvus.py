"""A Milvus upgrade started with credentials in the URL continues with the credentials of the environment: the state
file keeps neither the user nor the password (a user alone would shadow ``MILVUS_TOKEN``). A real Milvus server with
authorization on."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.connectors.engines import milvus_server
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.jobs.upgrade import start
from vecbridge.jobs.upgrade.state import UpgradeState

MODEL = "tests.embedders:mpnet_lookup"


@pytest.fixture(scope="module")
def private_server(tmp_path_factory):
    reason = milvus_server.unavailable()
    if reason:
        pytest.skip(reason)
    server = milvus_server.MilvusServer(tmp_path_factory.mktemp("milvus_upgrade"), auth=True,
                                        config=milvus_server.TEST_CONFIG).start()
    yield server
    server.stop()


def test_an_upgrade_started_with_a_password_continues_with_milvus_token(private_server, sample, tmp_path,
                                                                         monkeypatch):
    monkeypatch.delenv("MILVUS_TOKEN", raising=False)
    url, to = private_server.url("up_src"), private_server.url("up_src_v2")
    assert milvus_server.ROOT_PASSWORD in url
    connect(url).create(dim=384).upsert(VectorBatch(sample.ids[:600], sample.docs_old[:600],
                                                    [{"text": it["doc"]} for it in sample.items[:600]]))
    state = tmp_path / "m.upgrade.sqlite"
    status = start(url, model=MODEL, text_field="text", state_path=state, to=to, fit_sample=500)
    assert status["counts"]["native"] == 500 and "MILVUS_TOKEN" in status["credentials"]
    assert milvus_server.ROOT_PASSWORD.encode() not in state.read_bytes()
    assert status["serving_via"] == "alias up_src_serving"            # made with the credentials given to start
    st = UpgradeState.open(state)
    meta = json.dumps(st.meta)
    st.close()
    assert "root@" not in meta and "root:" not in meta
    r = CliRunner().invoke(main, ["upgrade", "reembed", "--state", str(state)])
    assert r.exit_code == 4 and "authentication failed" in r.output, r.output      # no credentials given
    monkeypatch.setenv("MILVUS_TOKEN", f"root:{milvus_server.ROOT_PASSWORD}")
    r = CliRunner().invoke(main, ["upgrade", "reembed", "--state", str(state), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["native_fraction"] == 1.0, r.output
    r = CliRunner().invoke(main, ["upgrade", "cutover", "--state", str(state), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["serving_via"] == "alias up_src_serving", r.output
    assert milvus_server.ROOT_PASSWORD not in r.output
