"""The E2B sandbox backend (`--sandbox e2b`): sandboxes on E2B through its `e2b` SDK."""
