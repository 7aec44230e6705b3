"""Fixtures shared by the tiny_llm tests."""
import pytest

from model import Config, TinyLM, deterministic


@pytest.fixture(scope="module")
def model():
    """The tiny transformer, built from the fixed seed once per module."""
    deterministic()
    return TinyLM(Config())
