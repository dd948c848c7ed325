"""Fixtures for tests and benchmarks: real (tiny) models built offline, in seconds."""

from evsys.testing.tiny_model import TinyModelRecipe, TrainingChat, build_tiny_model

__all__ = ["TinyModelRecipe", "TrainingChat", "build_tiny_model"]
