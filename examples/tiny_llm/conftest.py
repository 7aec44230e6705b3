"""Fixtures shared by the tiny_llm tests."""
import pytest

from maru_node import token_tcp_node
from model import Config, TinyLM, deterministic


@pytest.fixture(scope="module")
def model():
    """The tiny transformer, built from the fixed seed once per module."""
    deterministic()
    return TinyLM(Config())


@pytest.fixture(scope="module")
def tcp_node(tmp_path_factory):
    """A server also on TCP, with a token for this uid (maru_node.token_tcp_node)."""
    with token_tcp_node(tmp_path_factory.mktemp("tcp-node")) as node:
        yield node
