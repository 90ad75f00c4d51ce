"""Files that crafted configs and checkpoints try to copy, truncate or delete."""


class Victims:
    """A file and a folder that crafted configs try to copy, truncate or delete."""

    def __init__(self, folder):
        self.file = folder / "victim.txt"
        self.file.write_text("secret")
        self.dir = folder / "victim_dir"
        self.dir.mkdir()
        (self.dir / "keep.txt").write_text("keep")
        self.copy = folder / "copied.txt"

    def untouched(self) -> bool:
        return (
            self.file.read_text() == "secret"
            and sorted(p.name for p in self.dir.iterdir()) == ["keep.txt"]
            and (self.dir / "keep.txt").read_text() == "keep"
            and not self.copy.exists()
        )
