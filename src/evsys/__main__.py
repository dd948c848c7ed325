"""`python -m evsys ...`: the `evsys` command, for environments where its script is not on PATH."""

from evsys.cli.main import app

if __name__ == "__main__":
    app(prog_name="evsys")
