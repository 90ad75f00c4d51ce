"""`.env`: machine-local environment variables (the names are in .env.example), read once when
a command or `litlab.train` starts, before the config is composed (it reads some of them, e.g.
LITLAB_DATA_DIR). Variables already set in the environment win over the file."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def load_dotenv_files() -> list[Path]:
    """Read `.env` of the folder the command runs from, then the project root's (the first
    that sets a name wins); returns the files read."""
    from dotenv import load_dotenv

    read = []
    for folder in dict.fromkeys([Path.cwd(), PROJECT_ROOT]):
        path = folder / ".env"
        if path.is_file():
            load_dotenv(path, override=False)
            read.append(path)
    return read
