"""`python -m evsys ...`: the `evsys` command, for environments where its script is not on PATH."""

from evsys.cli.main import app

app(prog_name="evsys")
