"""Hostile cases on what a sweep reads back from its own folder (issue 46, second red team):
its code snapshot (`code/<tree hash>/`, run by every job of a resumed sweep), its Optuna
study's storage, and links and odd files anywhere in it. Each is refused in one line naming
the file before a job starts, with nothing outside the sweep folder touched; or handled as
documented. In process on folders laid out as a sweep leaves them, except where the console
line or the exit code is what is checked."""

import json
import os
import socket
from pathlib import Path

import pytest
from helpers.refusals import raises_one_line

from litlab.utils import code_state as snapshot
from litlab.utils.code_state import code_state


def _project(tmp_path: Path) -> Path:
    """A project folder with src/ and configs/ (no git: commit None), as `take` copies it."""
    root = tmp_path / "project"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("")
    (root / "src" / "pkg" / "train.py").write_text("print('the real code')\n")
    (root / "configs").mkdir()
    (root / "configs" / "train.yaml").write_text("seed: 1\n")
    return root


@pytest.fixture
def taken(tmp_path):
    root = _project(tmp_path)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    return root, sweep, snapshot.take(sweep, root)


def test_a_snapshot_as_taken_is_reused_and_its_caches_cleared(taken):
    root, sweep, code = taken
    assert code.parent == sweep / "code" and (code / "src" / "pkg" / "train.py").is_file()
    cache = code / "src" / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "train.cpython-311.pyc").write_bytes(b"crafted bytecode")  # Python would run it
    assert snapshot.take(sweep, root) == code
    assert not cache.exists()
    snapshot.check_folder(sweep / "code", root)


@pytest.mark.parametrize(
    "alter, named",
    [
        (lambda c: (c / "src/pkg/train.py").write_text("import os; os.system('x')\n"), "train.py"),
        (lambda c: (c / "src/pkg/evil.py").write_text("x = 1\n"), "evil.py"),
        (lambda c: (c / "configs/train.yaml").unlink(), "train.yaml"),
        (lambda c: (c / "src/sitecustomize.pyc").write_bytes(b"\0"), "sitecustomize.pyc"),
        (lambda c: (c / "run.sh").write_text("rm -rf ~\n"), "run.sh"),
        (lambda c: (c / "CODE.json").write_text("{not json"), "CODE.json"),
        (lambda c: (c / "CODE.json").unlink(), "CODE.json"),
        (
            lambda c: (c / "CODE.json").write_text('{"tree_sha256": "' + "0" * 64 + '"}'),
            "CODE.json",
        ),
        (lambda c: (c / "CODE.json").write_text("[1, 2]"), "CODE.json"),
        (lambda c: os.mkfifo(c / "src/pkg/fifo.py"), "fifo.py"),
    ],
)
def test_an_altered_snapshot_is_refused_naming_the_file(taken, alter, named):
    root, sweep, code = taken
    alter(code)
    before = sorted(p.relative_to(code).as_posix() for p in code.rglob("*"))
    raises_one_line(lambda: snapshot.take(sweep, root), named, "hydra.sweep.dir")
    raises_one_line(lambda: snapshot.check_folder(sweep / "code", root), named)
    assert sorted(p.relative_to(code).as_posix() for p in code.rglob("*")) == before


def test_a_crafted_record_of_the_same_tree_elsewhere_israises_one_line(taken):
    """CODE.json naming another project folder: the jobs would read data and write logs there."""
    root, sweep, code = taken
    record = json.loads((code / "CODE.json").read_text())
    (code / "CODE.json").write_text(json.dumps({**record, "project_root": "/etc"}))
    raises_one_line(lambda: snapshot.take(sweep, root), "CODE.json", "project_root", "/etc")


def test_a_snapshot_with_the_hash_of_crafted_code_israises_one_line(taken, tmp_path):
    """A whole snapshot made elsewhere, its record consistent with its own (other) code, put
    under the folder name of the code being launched."""
    root, sweep, code = taken
    other = _project(tmp_path / "other")
    (other / "src" / "pkg" / "train.py").write_text("print('crafted')\n")
    crafted = snapshot.take(tmp_path / "other-sweep", other)
    record = json.loads((crafted / "CODE.json").read_text())
    record["tree_sha256"] = code_state(root)["tree_sha256"]  # claims the launched code's hash
    (crafted / "CODE.json").write_text(json.dumps({**record, "project_root": str(root)}))
    os.rename(code, tmp_path / "moved-away")
    os.rename(crafted, code)
    raises_one_line(lambda: snapshot.take(sweep, root), "train.py", "altered")


@pytest.mark.parametrize("where", ["code", "snapshot", "file", "folder"])
def test_links_in_or_to_a_snapshot_areraises_one_line(taken, tmp_path, where):
    root, sweep, code = taken
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    if where == "code":
        os.rename(sweep / "code", outside / "code")
        (sweep / "code").symlink_to(outside / "code")
    elif where == "snapshot":
        os.rename(code, outside / code.name)
        code.symlink_to(outside / code.name)
    elif where == "file":  # same bytes, but it can change after the check
        train = code / "src" / "pkg" / "train.py"
        (outside / "train.py").write_bytes(train.read_bytes())
        train.unlink()
        train.symlink_to(outside / "train.py")
    else:
        os.rename(code / "configs", outside / "configs")
        (code / "configs").symlink_to(outside / "configs")
    raises_one_line(lambda: snapshot.take(sweep, root), "symbolic link")
    assert (outside / "keep.txt").read_text() == "the user's"


def test_a_hard_linked_file_in_a_snapshot_israises_one_line(taken, tmp_path):
    root, sweep, code = taken
    os.link(code / "src" / "pkg" / "train.py", tmp_path / "other-name.py")
    raises_one_line(lambda: snapshot.take(sweep, root), "train.py", "hard link")


def test_a_partial_copy_that_is_a_link_is_never_copied_through(tmp_path):
    root = _project(tmp_path)
    sweep, outside = tmp_path / "sweep", tmp_path / "outside"
    (sweep / "code").mkdir(parents=True)
    outside.mkdir()
    name = code_state(root)["tree_sha256"][:12]
    (sweep / "code" / f"{name}.partial-{os.getpid()}").symlink_to(outside)
    code = snapshot.take(sweep, root)
    assert os.listdir(outside) == [] and (code / "src" / "pkg" / "train.py").is_file()


def test_the_same_code_committed_since_is_reused_with_a_true_record(taken):
    root, sweep, code = taken
    record = json.loads((code / "CODE.json").read_text())
    (code / "CODE.json").write_text(json.dumps({**record, "commit": "0" * 40, "dirty": True}))
    assert snapshot.take(sweep, root) == code
    assert json.loads((code / "CODE.json").read_text())["commit"] is None  # the state launched


def test_a_sweep_folder_with_an_altered_snapshot_is_refused_before_a_job(taken):
    """The resume's own check (runs.sweep_dir.check_owned), before anything is written."""
    from litlab.runs.sweep_dir import check_owned
    from litlab.sweeps import plan
    from litlab.utils import commands

    _root, sweep, code = taken
    own = commands.command("train", ["seed=1", f"hydra.sweep.dir={sweep}"], multirun=True)
    plan.write_plan(sweep, [["seed=1"]], own)
    check_owned(sweep, plan.GRID, "train")
    (code / "src" / "pkg" / "__init__.py").write_text("import os\n")
    raises_one_line(lambda: check_owned(sweep, plan.GRID, "train"), "CODE.json", "tree_sha256")
    (code / "src" / "pkg" / "__init__.py").write_text("")
    (sweep / "code" / "notes.txt").write_text("mine")
    raises_one_line(lambda: check_owned(sweep, plan.GRID, "train"), "notes.txt", "not a folder")
    (sweep / "code" / "notes.txt").unlink()
    server = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(code / "src" / "pkg")  # a relative name: a socket's path holds 108 bytes at most
    try:
        server.bind("sock")
    finally:
        os.chdir(here)
    try:
        raises_one_line(
            lambda: check_owned(sweep, plan.GRID, "train"), "sock", "not a regular file"
        )
    finally:
        server.close()


# The Optuna study's storage: a SQLite file is written only when it is a study's (or new).


def _sqlite(path: Path, *statements: str) -> Path:
    import sqlite3

    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    return path


def _check_storage(url):
    from litlab.sweeps.optuna_search import check_sqlite

    check_sqlite(url)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_text("my notes"), ("file is not a database",)),
        (lambda p: p.write_bytes(b"SQLite format 3\0" + b"\xff" * 200), ("cannot be read",)),
        (
            lambda p: _sqlite(p, "CREATE TABLE invoices (id INTEGER)"),
            ("another program", "invoices"),
        ),
        (lambda p: p.mkdir(), ("not a regular file",)),
        (lambda p: os.mkfifo(p), ("not a regular file",)),
        (lambda p: p.symlink_to(_sqlite(p.with_name("real.db"))), ("symbolic link",)),
        (lambda p: Path(f"{p}-journal").symlink_to(p.parent / "x"), ("-journal", "symbolic link")),
    ],
)
def test_a_sqlite_storage_that_is_not_a_studys_is_refused_untouched(tmp_path, make, words):
    db = tmp_path / "study.db"
    make(db)
    before = {p.name: (p.lstat().st_mtime_ns, p.lstat().st_size) for p in tmp_path.iterdir()}
    raises_one_line(lambda: _check_storage(f"sqlite:///{db}"), "hydra.sweeper.storage=", *words)
    assert {
        p.name: (p.lstat().st_mtime_ns, p.lstat().st_size) for p in tmp_path.iterdir()
    } == before


def test_a_new_empty_or_optuna_sqlite_storage_is_let_in(tmp_path):
    import optuna

    _check_storage(f"sqlite:///{tmp_path / 'new.db'}")
    (tmp_path / "empty.db").write_bytes(b"")
    _check_storage(f"sqlite:///{tmp_path / 'empty.db'}")
    _check_storage(f"sqlite:///{_sqlite(tmp_path / 'blank.db')}")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="s", storage=url)
    _check_storage(url)
    _check_storage("postgresql://u:pw@h/db")  # a server: checked when it connects


def test_a_study_database_copied_from_another_sweep_israises_one_line(tmp_path):
    import optuna

    from litlab.sweeps import optuna_search, plan
    from litlab.utils import commands

    sweeps = []
    for name in ("a", "b"):
        sweep = tmp_path / name
        sweep.mkdir()
        own = commands.command("train", [f"hydra.sweep.dir={sweep}"], multirun=True)
        plan.write_plan(sweep, None, own, kind=plan.SEARCH, study="s")
        sweeps.append(sweep)
    first = plan.read_plan(sweeps[0])["id"]
    plan.write_plan(
        sweeps[0], None, plan.read_plan(sweeps[0])["resume"], kind=plan.SEARCH, study="s"
    )
    assert (
        plan.read_plan(sweeps[0])["id"] == first != plan.read_plan(sweeps[1])["id"]
    )  # kept on resume
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{sweeps[0] / 'optuna.db'}")
    optuna_search._check_own_study(study, sweeps[0])
    optuna_search._check_own_study(study, sweeps[0])  # its own, again
    raises_one_line(
        lambda: optuna_search._check_own_study(study, sweeps[1]), "optuna.db", "another sweep"
    )


def test_a_crafted_best_trial_makes_no_printed_command(tmp_path, capsys):
    import optuna
    from optuna.distributions import FloatDistribution

    from litlab.sweeps import optuna_search

    study = optuna.create_study(study_name="s", direction="maximize")
    trial = optuna.trial.create_trial(
        params={"model._target_": 0.5, "x; rm -rf ~": 0.1},
        distributions={
            "model._target_": FloatDistribution(0, 1),
            "x; rm -rf ~": FloatDistribution(0, 1),
        },
        value=1.0,
    )
    study.add_trial(trial)
    optuna_search.write_results(study, tmp_path, "sqlite://", ["seed=1"])
    out = capsys.readouterr().out
    assert "_target_" not in out and "rm -rf" not in out and "train it again" not in out


# What a sweep reads back as data: a plan nested past the recursion limit, stored commands.


def test_a_plan_nested_past_the_recursion_limit_is_not_json_in_one_line(tmp_path):
    from litlab.runs.sweep_dir import check_owned
    from litlab.sweeps import plan

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / plan.PLAN).write_text("[" * 100_000 + "]" * 100_000)
    raises_one_line(lambda: check_owned(sweep, plan.GRID, "train"), plan.PLAN, "not JSON")


@pytest.mark.parametrize(
    "word",
    [
        "'+hydra.callbacks.x=${oc.create:\"{\\\\x5ftarget\\\\x5f: os.system}\"}'",
        "'extras.print_config=${oc.decode:\"!!python/object\"}'",
        "model._target_=os.system",
        "+hydra.job.env_set.LD_PRELOAD=/tmp/x.so",
        "'seed=1'$'\\n''rm -rf ~'",
        "seed=1 ; rm -rf ~",
        "seed=`id`",
        "--config-dir=/tmp",
    ],
)
def test_a_stored_command_that_builds_code_or_runs_shell_is_not_printed(word):
    from litlab.utils import commands

    with pytest.raises(commands.Untrusted):
        commands.stored(f"python src/train.py -m {word}", entry="train", multirun=True)


@pytest.mark.parametrize(
    "word", ["seed=1", "'seed=$(id)'", "'paths.data_dir=${oc.env:HOME}/data'", "'x=a b'"]
)
def test_a_stored_command_of_plain_overrides_is_printed(word):
    from litlab.utils import commands

    text = f"python src/train.py -m {word}"
    assert commands.printable(text, entry="train", multirun=True) == text


@pytest.mark.parametrize("lock", ["sweep", "run"])
def test_a_lock_file_hard_linked_to_the_users_file_is_refused_untouched(tmp_path, lock):
    """A folder holding only `.sweep.lock` counts as new; the lock is written in place, so a
    hard link there would overwrite the user's file under its other name."""
    from litlab.checkpointing.run_lock import RunLock
    from litlab.runs.sweep_dir import SweepLock, check_owned
    from litlab.sweeps import plan

    folder, users = tmp_path / "sweep", tmp_path / "notes.txt"
    folder.mkdir()
    users.write_text("the user's")
    cls = SweepLock if lock == "sweep" else RunLock
    os.link(users, folder / cls.file)
    if lock == "sweep":
        assert check_owned(folder, plan.GRID, "train") is None  # new, but for its lock
    raises_one_line(lambda: cls(folder).acquire(), "hard link", str(cls.file))
    assert users.read_text() == "the user's"


@pytest.mark.parametrize("how", ["directory", "symlink", "fifo"])
def test_a_lock_that_is_no_plain_file_israises_one_line(tmp_path, how):
    from litlab.runs.sweep_dir import SweepLock

    folder = tmp_path / "sweep"
    folder.mkdir()
    lock = folder / ".sweep.lock"
    {
        "directory": lock.mkdir,
        "symlink": lambda: lock.symlink_to(tmp_path),
        "fifo": lambda: os.mkfifo(lock),
    }[how]()
    raises_one_line(lambda: SweepLock(folder).acquire(), ".sweep.lock")


def test_a_stale_lock_of_a_dead_process_is_taken_over_a_live_oneraises_one_line(tmp_path):
    import subprocess
    import sys

    from litlab.runs.sweep_dir import SweepLock

    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / ".sweep.lock").write_text("999999 host\npython src/train.py -m seed=1\n")
    SweepLock(folder).acquire().release()  # no process holds the OS lock: taken over
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[2]); "
        "from litlab.runs.sweep_dir import SweepLock; "
        "SweepLock(sys.argv[1], note='python src/train.py -m seed=1').acquire(); "
        "print('held', flush=True); time.sleep(30)"
    )
    src = str(Path(snapshot.__file__).parents[2])
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), src], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        raises_one_line(
            lambda: SweepLock(folder).acquire(), "in use by another sweep", f"PID {holder.pid}"
        )
    finally:
        holder.kill()
        holder.wait()


# A single run's dir: the same rule as a sweep's folder.


def test_a_run_into_a_folder_of_the_users_files_is_refused_untouched(tmp_path, capfd):
    from helpers.runs import command_in_process

    mine = tmp_path / "logs" / "mine"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "metrics.json").write_text("the user's")
    (mine / "checkpoints" / "last.ckpt").write_bytes(b"the user's")
    before = sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*"))
    overrides = [f"hydra.run.dir={mine}", "extras.print_config=false"]
    code, _, err = command_in_process("train.py", overrides, tmp_path / "logs", capfd, quiet=False)
    assert code == 2, err
    assert err.count("\n") == 1 and "no litlab run wrote (checkpoints, metrics.json" in err
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == before
    assert (mine / "metrics.json").read_text() == "the user's"


def test_a_run_dir_that_is_new_or_a_runs_own_is_let_in(tmp_path):
    from litlab.runs.run_dir import _check_own_run

    (tmp_path / "new").mkdir()
    (tmp_path / "new" / ".run.lock").write_text("1 host\n")
    (tmp_path / "new" / "train.log").write_text("")
    _check_own_run(tmp_path / "new")
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / "metrics.json").write_text("{}")
    _check_own_run(tmp_path / "run")


def test_a_search_into_another_programs_database_is_refused_before_its_folder(tmp_path):
    import sqlite3
    import subprocess
    import sys

    from helpers.runs import ROOT

    app = _sqlite(tmp_path / "app.db", "CREATE TABLE invoices (id INTEGER)")
    before = app.read_bytes()
    sqlite3.connect(app).close()
    proc = subprocess.run(
        [
            sys.executable,
            "src/train.py",
            "hydra.mode=MULTIRUN",
            "hparams_search=digits_cnn",
            f"paths.log_dir={tmp_path / 'logs'}",
            f"hydra.sweeper.storage=sqlite:///{app}",
            "extras.print_config=false",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "another program (tables invoices)" in proc.stderr
    assert app.read_bytes() == before and not (tmp_path / "logs").exists()


def test_a_study_whose_schema_another_worker_is_still_creating_is_waited_for(tmp_path, monkeypatch):
    """Two workers sharing one study start together: the second may read the file while the
    first has created only some of Optuna's tables (seen in the slow stage: 'the database of
    another program'). A part of Optuna's schema is read again until it is whole; one that
    stays partial, or one table that is not Optuna's, is refused in one line."""
    import threading

    from litlab.compat.optuna import storage_tables
    from litlab.errors import UserError
    from litlab.sweeps import optuna_search

    monkeypatch.setattr(optuna_search, "SCHEMA_WAIT_S", 1.0)
    made = _sqlite(tmp_path / "made.db", "CREATE TABLE studies (study_id INTEGER)")
    rest = sorted(storage_tables() - {"studies"})  # the installed Optuna's own schema
    finish = threading.Timer(
        0.3, lambda: _sqlite(made, *(f"CREATE TABLE {t} (id INTEGER)" for t in rest))
    )
    finish.start()
    optuna_search.check_sqlite(f"sqlite:///{made}")  # waited for the other worker
    finish.join()
    stuck = _sqlite(tmp_path / "stuck.db", "CREATE TABLE studies (study_id INTEGER)")
    with pytest.raises(UserError, match="a part of an Optuna study's tables"):
        optuna_search.check_sqlite(f"sqlite:///{stuck}")
    mixed = _sqlite(
        tmp_path / "mixed.db",
        "CREATE TABLE studies (x INTEGER)",
        "CREATE TABLE invoices (id INTEGER)",
    )
    with pytest.raises(UserError, match=r"another program \(tables invoices\)"):
        optuna_search.check_sqlite(f"sqlite:///{mixed}")
