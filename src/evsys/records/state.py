"""`KeptState`: what `evsys run --keep-state` kept of one trial's final filesystem (`<trial>/state/`).

The archive (`upper.tar.gz`) holds every file, directory and symlink the agent phase wrote or changed; what it
deleted is listed in `deletions` (never stored as overlay whiteouts), directories whose earlier content it
replaced as a whole in `opaque_dirs`. Paths are absolute sandbox paths.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

STATE_DIR = "state"
STATE_ARCHIVE = "upper.tar.gz"
STATE_MANIFEST = "manifest.json"
DEFAULT_STATE_LIMIT_MB = 256


class KeptState(BaseModel):
    """The manifest of a trial's kept final filesystem (`<trial>/state/manifest.json`)."""

    backend: str = Field(description="The sandbox backend the trial ran on.")
    archive: str = STATE_ARCHIVE
    size: int = Field(0, description="Bytes of file content in the archive (before compression).")
    entries: int = Field(0, description="Files, directories and links in the archive.")
    limit_bytes: int = Field(description="The bound on `size` the trial ran with.")
    deletions: list[str] = Field(default_factory=list, description="Paths the agent phase deleted.")
    opaque_dirs: list[str] = Field(
        default_factory=list, description="Directories whose earlier content was replaced as a whole."
    )
    agent_owned: list[str] = Field(
        default_factory=list, description="Archived paths the sandbox's agent user owned."
    )
    cut: list[str] = Field(default_factory=list, description="Files left out: over the size limit.")
    skipped: list[str] = Field(
        default_factory=list, description="Device nodes, fifos and sockets: never kept."
    )

    @property
    def complete(self) -> bool:
        """True when nothing was left out for the size limit."""
        return not self.cut
