"""The Modal sandbox backend (`--sandbox modal`): sandboxes on Modal through its `modal` SDK."""
