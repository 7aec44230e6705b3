"""key_to_path: the one mapping from the original API's keys to paths."""

import pytest

from maru import key_to_path


def test_ints_in_decimal_and_same_as_their_string():
    assert key_to_path(12345) == "/kv/12345"
    assert key_to_path("12345") == key_to_path(12345) == key_to_path(b"12345")
    assert key_to_path(-7, "ns") == "/ns/-7"


def test_strings_cannot_leave_the_namespace():
    assert key_to_path("a/b") == "/kv/a%2Fb"
    assert key_to_path("..") == "/kv/%2E%2E"
    assert key_to_path(".") == "/kv/%2E"
    assert key_to_path("../../etc") == "/kv/..%2F..%2Fetc"
    assert key_to_path("a..b") == "/kv/a..b"


def test_escaping_is_one_to_one():
    keys = ["%", "%25", "a b", "a%20b", "..", "%2E%2E", "é", "model@1@2@abc", "x/y", "x%2Fy"]
    paths = [key_to_path(k) for k in keys]
    assert len(set(paths)) == len(keys)
    for p in paths:
        assert p.count("/") == 2


def test_namespaces():
    assert key_to_path(1, "llama/v1") == "/llama/v1/1"
    assert key_to_path(1, "/kv/") == "/kv/1"
    for bad in ["", "/", "a//b", "..", "a/../b", "."]:
        with pytest.raises(ValueError):
            key_to_path(1, bad)


def test_bad_keys():
    with pytest.raises(ValueError):
        key_to_path("")
    with pytest.raises(TypeError):
        key_to_path(True)
    with pytest.raises(TypeError):
        key_to_path(1.5)  # type: ignore[arg-type]
