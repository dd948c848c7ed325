"""evsys: run LLM agents on tasks in isolated sandboxes, score them, and get token-exact trajectories back."""

__version__ = "0.1.0"
