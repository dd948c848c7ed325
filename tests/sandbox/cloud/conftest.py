"""Fixtures for the cloud backends' tests: their stand-in services (standins.py)."""

from __future__ import annotations

from standins import daytona_standin, e2b_standin, modal_standin

__all__ = ["daytona_standin", "e2b_standin", "modal_standin"]
