"""The one secret filter: which keys are secret, URLs, free text, the secrets of arguments and of the environment,
and whole documents."""
from __future__ import annotations

import pytest

from vecbridge.connectors.url import redact
from vecbridge.jobs.upgrade import url_without_secrets
from vecbridge.secrets import (
    MASK,
    environment_secrets,
    has_secrets,
    is_secret_key,
    redact_text,
    redact_url,
    scrub,
    secrets_in,
    strip_url,
)

SECRET_KEYS = ["password", "PASSWORD", "passwd", "pwd", "pass", "passphrase", "user_pass", "db_password",
               "PGPASSWORD", "sslpassword", "api_key", "api-key", "apikey", "API_KEY", "QDRANT_API_KEY", "x-api-key",
               "token", "MILVUS_TOKEN", "CHROMA_TOKEN", "access_token", "authToken", "secret", "client_secret",
               "secret_key", "access_key", "AWS_ACCESS_KEY", "private_key", "auth", "http_auth", "authorization",
               "Authorization", "bearer", "api%5Fkey"]
PLAIN_KEYS = ["table", "vector", "passed", "passes", "passfile", "tokens", "n_tokens", "tokenizer", "author",
              "authentication", "compass", "keys", "key", "credentials", "sslmode", "db", "collection", None, 3]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_keys_that_hold_no_secret(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize("url,shown", [
    ("postgresql://app:pw@db:5432/prod?table=items", "postgresql://app:***@db:5432/prod?table=items"),
    ("milvus://root:Mil%40vus%2F1@127.0.0.1:19530/coll?db=x", "milvus://root:***@127.0.0.1:19530/coll?db=x"),
    ("postgresql://u:pa/ss@h/db?table=t", "postgresql://u:***@h/db?table=t"),          # an unencoded "/"
    ("postgresql://u:p@ss@h/db?table=t", "postgresql://u:***@h/db?table=t"),           # an unencoded "@"
    ("postgresql://u@h/db?table=t&password=pw&sslmode=require", "postgresql://u@h/db?table=t&password=***&sslmode=require"),
    ("qdrant://h:6333/c?api_key=sk-1&grpc=1", "qdrant://h:6333/c?api_key=***&grpc=1"),
    ("qdrant://h:6333/c?API-KEY=a&apikey=b&Token=c&secret=d&pwd=e&passwd=f",
     "qdrant://h:6333/c?API-KEY=***&apikey=***&Token=***&secret=***&pwd=***&passwd=***"),
    ("qdrant://h/c?api%5Fkey=sk%2D1", "qdrant://h/c?api%5Fkey=***"),                   # percent-encoded key
    ("milvus://root:pw@[::1/c", "milvus://root:***@[::1/c"),                            # unparseable all the same
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown and redact(url) == shown and has_secrets(url)


@pytest.mark.parametrize("url", [
    "postgresql://app@db.example:5432/prod?table=a%20b&sslmode=require", "qdrant:///abs/dir/coll?vector=v2",
    "qdrant://./rel/dir/coll", "qdrant://:memory:/coll", "chroma:///abs/dir?collection=c", "milvus://h:19530/c#f",
    "file:///tmp/x@y/z", "/plain/path", "relative/dir", "qdrant-edge:///abs/shard",
])
def test_a_url_without_secrets_is_unchanged(url):
    assert redact_url(url) == url and strip_url(url) == url and not has_secrets(url)


def test_an_empty_credential_is_no_secret():
    for url in ("postgresql://u:@h/db?table=t", "chroma://h:8000/c?token="):
        assert redact_url(url) == url and not has_secrets(url)


def test_strip_url_leaves_the_credential_out():
    assert strip_url("postgresql://app:pw@db:5432/prod?table=items&password=pw&sslmode=require") == \
        "postgresql://app@db:5432/prod?table=items&sslmode=require"
    assert strip_url("milvus://root:s3cret@127.0.0.1:19530/items?db=d", keep_user=False) == \
        "milvus://127.0.0.1:19530/items?db=d"
    assert strip_url("milvus://root@h/c", keep_user=False) == "milvus://h/c"
    assert strip_url("qdrant://h:6333/c?api_key=k") == "qdrant://h:6333/c"
    # the upgrade's state file keeps this form: the user, unless the store's token is user:password as one
    assert url_without_secrets("postgresql://app:pw@db/prod?table=t") == "postgresql://app@db/prod?table=t"
    assert url_without_secrets("milvus://root:pw@h:19530/c") == "milvus://h:19530/c"


def test_redact_text():
    text = ('cannot reach postgresql://u:s3cret@h/db?table=x, PGPASSWORD=abc MILVUS_TOKEN:root:xyz '
            '{"api_key": "sk-1", "token": 5} Authorization: Bearer abc.def password = "two words"')
    shown = redact_text(text)
    for secret in ("s3cret", "abc", "root:xyz", "sk-1", "5}", "abc.def", "two words"):
        assert secret not in shown, (secret, shown)
    assert shown == ('cannot reach postgresql://u:***@h/db?table=x, PGPASSWORD=*** MILVUS_TOKEN:*** '
                     '{"api_key": "***", "token": ***} Authorization: Bearer *** password = "***"')


def test_redact_text_leaves_prose_and_names_alone():
    for text in ("the state file keeps no password or token: later commands read them from the environment",
                 "check USER:PASSWORD in the URL or MILVUS_TOKEN", "model my_token_model:encode", "3 passed: ok",
                 "tokens=12 authentication failed", "collection not found: qdrant://h:6333/tokens",
                 "check QDRANT_API_KEY or ?api_key="):
        assert redact_text(text) == text


def test_literal_secrets_as_written_and_percent_encoded():
    assert redact_text('connection to "u:p@host" failed: password=p; operation not supported', ["p"]) == \
        'connection to "u:***@host" failed: password=***; operation not supported'   # a short one alone only
    assert redact_text("token xhunter22secretx rejected", ["hunter22secret"]) == "token x***x rejected"
    assert redact_text("bad port 'a%2Fb%40c%21x'", ["a/b@c!x"]) == "bad port '***'"


def test_secrets_in_arguments():
    found = secrets_in("postgresql://u:pw-S3CR3T%21/x@h/db?table=t&password=p%40ss", "--json", "token=abc",
                       "qdrant://h/c?api_key=sk-1=align.vb", "table=t", "file:///tmp/x")
    assert {"pw-S3CR3T%21/x", "pw-S3CR3T!/x", "pw-S3CR3T%21", "p%40ss", "p@ss", "abc", "sk-1"} <= set(found)
    assert not {"t", "u", "h", "--json", "/tmp/x"} & set(found)


def test_environment_secrets():
    env = {"PGPASSWORD": "hunter2", "MILVUS_TOKEN": "root:Milvus", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
           "PATH": "/usr/bin", "QDRANT_API_KEY": "k", "PGUSER": "app", "PWD": "/tmp/ci", "OLDPWD": "/home/app"}
    assert set(environment_secrets(env)) == {"hunter2", "root:Milvus", "Milvus"}   # the working directory is none


def test_settings_about_secrets_are_not_secrets():
    """Ray sets RAY_AUTH_MODE=token in its driver where a token file exists: taken for a secret, every "token" in a
    message (the service's "send the header Authorization: Bearer <token>") was masked."""
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/home/app/.ray/auth_token", "SVC_AUTH_TYPE": "bearer",
           "RAY_AUTH_TOKEN": "rt-4f9a0c77", "MILVUS_TOKEN": "root:Milvus"}
    found = environment_secrets(env)
    assert set(found) == {"rt-4f9a0c77", "root:Milvus", "Milvus"}
    assert redact_text("missing or wrong token: Bearer <token>; rt-4f9a0c77", found) == \
        "missing or wrong token: Bearer <token>; ***"


def test_scrub_nested_structures():
    doc = {"source": {"url": "postgresql://app:pw@db/prod?table=t", "count": 3},
           "params": {"password": "x", "api_key": 123, "token": None, "passed": True, "n_tokens": 4,
                      "auth": {"user": "u", "password": "y"}, "secret": ""},
           "runs": [("milvus://root:pw@h/c", 1.5), {"note": "PGPASSWORD=hunter2 set"}],
           "queries": "qdrant://h/c?api_key=sk-1", "credentials": "the state file keeps no password"}
    out = scrub(doc, secrets=["hunter2"])
    assert out == {"source": {"url": "postgresql://app:***@db/prod?table=t", "count": 3},
                   "params": {"password": MASK, "api_key": MASK, "token": None, "passed": True, "n_tokens": 4,
                              "auth": MASK, "secret": ""},
                   "runs": [("milvus://root:***@h/c", 1.5), {"note": "PGPASSWORD=*** set"}],
                   "queries": "qdrant://h/c?api_key=***", "credentials": "the state file keeps no password"}
    assert doc["params"]["password"] == "x"   # a copy: the original is left as it was


def test_scrub_takes_result_objects_and_leaves_other_values():
    class Result:
        def as_dict(self):
            return {"target": "milvus://root:pw@h/c", "n": 2}

    assert scrub([Result(), 1.0, None, b"raw"]) == [{"target": "milvus://root:***@h/c", "n": 2}, 1.0, None, b"raw"]


def test_ray_task_arguments_show_no_secret(monkeypatch):
    """A store URL and the driver's credentials travel to Ray tasks whole, and show no secret where Ray prints them."""
    import pickle

    from vecbridge.runtime.ray_engine import Environment, Sealed

    url = "postgresql://app:pw-S3CR3T@db/prod?table=t&password=pw-S3CR3T"
    sealed = Sealed(url)
    assert "S3CR3T" not in repr(sealed) + str(sealed) and pickle.loads(pickle.dumps(sealed)).url == url
    monkeypatch.setenv("PGPASSWORD", "pw-S3CR3T")
    env = Environment.of_driver()
    assert "S3CR3T" not in repr(env) and pickle.loads(pickle.dumps(env)).values["PGPASSWORD"] == "pw-S3CR3T"
