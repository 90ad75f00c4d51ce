"""The Optuna study of a search, read from a copy of the sweep dir's `optuna.db` (the report
never writes into a study, and a worker still running keeps its file to itself)."""

import contextlib
import shutil
import tempfile
from pathlib import Path

from litlab.errors import one_line
from litlab.report import files


@contextlib.contextmanager
def opened(sweep: Path):
    """Yields (the study or None, why there is none)."""
    db = files.inside(sweep, "optuna.db")
    if db is None:
        yield (
            None,
            (
                "no Optuna study in this sweep dir (optuna.db): a grid sweep, or a search whose "
                "study lives on a database server"
            ),
        )
        return
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="litlab-report-") as tmp:
        copy = Path(tmp) / "optuna.db"
        shutil.copyfile(db, copy)
        try:
            storage = optuna.storages.RDBStorage(f"sqlite:///{copy}")
            names = optuna.get_all_study_names(storage)
            name = sweep.name if sweep.name in names else (names or [None])[0]
            study = optuna.load_study(study_name=name, storage=storage) if name else None
        except Exception as err:  # noqa: BLE001  (a file that is no study: said on the page)
            yield None, f"optuna.db cannot be read as an Optuna study ({one_line(err)})"
            return
        yield study, "" if study else "optuna.db holds no study"
        storage.engine.dispose()


def plot(kind: str, study) -> tuple[object, str]:
    """(Optuna's figure, "") or (None, why it cannot be drawn): kind is `importance` or
    `parallel`."""
    import warnings

    import optuna.visualization as vis

    draw = vis.plot_param_importances if kind == "importance" else vis.plot_parallel_coordinate
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning and friends: not the page's
            return draw(study), ""
    except Exception as err:  # noqa: BLE001  (e.g. fewer than 2 completed trials)
        return None, one_line(err)
