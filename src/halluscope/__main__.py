"""``python -m halluscope`` = the ``halluscope`` command."""

from halluscope.cli.main import app

if __name__ == "__main__":
    app(prog_name="halluscope")
