"""Stores for the tests: SQLite always, and every server store whose server
scripts/test.sh started, read from the same variables as the Rust tests
(LEASEHOLD_TEST_POSTGRES_URL, ..._MYSQL_URL, ..._ZOOKEEPER_URL, ..._REDIS_URL, ..._ETCD_URL, ..._S3_ENDPOINT,
..._DYNAMODB_ENDPOINT, ..._AZBLOB_CONNECTION_STRING). Without one, that
store's tests are skipped with a message saying which variable is missing;
with LEASEHOLD_REQUIRE_EMULATORS=1 they fail instead.

Each store gets a store of its own (a new table, prefix, container or
bucket prefix) per test session, with a short store max TTL, so that its
first grant's quarantine is short; each test uses keys of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

import pytest

import leasehold

STORES = ["sqlite", "postgres", "mysql", "zookeeper", "redis", "redis-sentinel", "redis-cluster", "etcd", "s3", "dynamodb", "azblob"]

# The credentials DynamoDB Local and moto are given in the Rust tests too.
AWS = {"AWS_ACCESS_KEY_ID": "leaseholdtests", "AWS_SECRET_ACCESS_KEY": "leasehold-test-secret"}


@dataclass
class Env:
    """A store for the tests: its URL, the environment its processes need,
    and the shortest TTL it takes."""

    name: str
    url: str
    env: Dict[str, str]
    ttl: float

    def open(self) -> leasehold.Store:
        return leasehold.open(self.url)

    def key(self, name: str) -> str:
        return f"{name}-{uuid.uuid4().hex[:8]}"

    def child(self, code: str, *args: str) -> subprocess.Popen:
        """A Python process running ``code`` with LEASEHOLD_URL set, its
        stdout a line-buffered text pipe."""
        env = dict(os.environ, **self.env, LEASEHOLD_URL=self.url, PYTHONUNBUFFERED="1")
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _var(store: str, var: str, server: str) -> Optional[str]:
    value = os.environ.get(var)
    if value:
        return value
    message = f"{store}: {var} is not set (scripts/test.sh sets it and starts {server})"
    if os.environ.get("LEASEHOLD_REQUIRE_EMULATORS") == "1":
        pytest.fail(message + ", and LEASEHOLD_REQUIRE_EMULATORS=1")
    pytest.skip(message)
    return None


def _with_params(url: str, params: str) -> str:
    return url + ("&" if "?" in url else "?") + params


def _make(store: str, tmp: str) -> Env:
    unique = uuid.uuid4().hex[:12]
    if store == "sqlite":
        return Env(store, f"sqlite:{tmp}/leases.db", {}, 2.0)
    if store in ("postgres", "mysql", "redis", "redis-sentinel", "redis-cluster", "etcd"):
        var, server, own = {
            "postgres": ("POSTGRES", "PostgreSQL", f"table=py_{unique}"),
            "mysql": ("MYSQL", "MySQL", f"table=py_{unique}"),
            "redis": ("REDIS", "Redis", f"prefix=py-{unique}:"),
            "redis-sentinel": ("REDIS_SENTINEL", "Redis Sentinel", f"prefix=py-{unique}:"),
            "redis-cluster": ("REDIS_CLUSTER", "Redis Cluster", f"prefix=py-{unique}:"),
            "etcd": ("ETCD", "etcd", f"prefix=py-{unique}/"),
        }[store]
        url = _var(store, f"LEASEHOLD_TEST_{var}_URL", server)
        assert url is not None
        return Env(store, _with_params(url, f"{own}&max_ttl=2s"), {}, 2.0)
    if store == "zookeeper":
        url = _var(store, "LEASEHOLD_TEST_ZOOKEEPER_URL", "ZooKeeper")
        assert url is not None
        base = url.split("?")[0].rstrip("/")
        return Env(store, f"{base}/py-{unique}?max_ttl=2s", {}, 2.0)
    if store == "s3":
        endpoint = _var(store, "LEASEHOLD_TEST_S3_ENDPOINT", "moto")
        url = f"s3://leasehold-py-tests/py-{unique}?region=us-east-1&endpoint={endpoint}&max_ttl=4s"
        return Env(store, url, dict(AWS), 4.0)
    if store == "dynamodb":
        endpoint = _var(store, "LEASEHOLD_TEST_DYNAMODB_ENDPOINT", "DynamoDB Local")
        url = f"dynamodb://py-{unique}?region=us-east-1&endpoint={endpoint}&max_ttl=2s"
        return Env(store, url, dict(AWS), 2.0)
    if store == "azblob":
        cs = _var(store, "LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING", "Azurite")
        assert cs is not None
        # Azure's shortest lease is 15 s.
        return Env(store, f"azblob://py-{unique}?max_ttl=15s", {"AZURE_STORAGE_CONNECTION_STRING": cs}, 15.0)
    raise AssertionError(store)


_envs: Dict[str, Env] = {}


@pytest.fixture(scope="session")
def _tmp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("stores"))


@pytest.fixture(params=STORES)
def store_env(request: pytest.FixtureRequest, _tmp: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    """Each store in turn (a store of its own per session)."""
    name = request.param
    env = _envs.get(name)
    if env is None:
        env = _make(name, _tmp)
        for k, v in env.env.items():
            os.environ[k] = v
        # A new store of our own: no earlier one existed, no quarantine.
        leasehold.init(env.url, new=True)
        _envs[name] = env
    yield env


@pytest.fixture
def sqlite_env(_tmp: str) -> Env:
    return Env("sqlite", f"sqlite:{_tmp}/{uuid.uuid4().hex[:8]}.db", {}, 2.0)


def read_line(proc: subprocess.Popen, what: str) -> str:
    """The child's next stdout line (the test's timeout bounds the wait); a
    child that ended first fails the test with its stderr."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        stderr = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"expected {what}; the child exited {proc.returncode}: {stderr}")
    return line.rstrip("\n")


def finish(proc: subprocess.Popen, timeout: float = 60) -> List[str]:
    """Waits for the child; its remaining stdout lines (stderr on failure)."""
    out, err = proc.communicate(timeout=timeout)
    proc.stderr_text = err  # type: ignore[attr-defined]
    return [line for line in out.splitlines() if line]
