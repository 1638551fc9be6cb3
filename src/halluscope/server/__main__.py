"""``python -m halluscope.server`` = ``halluscope serve``."""

import typer

from halluscope.cli.serve import serve_command

if __name__ == "__main__":
    typer.run(serve_command)
