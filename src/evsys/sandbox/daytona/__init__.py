"""The Daytona sandbox backend (`--sandbox daytona`): sandboxes on Daytona through its `daytona` SDK."""
