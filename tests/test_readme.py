"""README.md's promises: every command it shows is run by some test (COVERED names which), every
train.py command composes, the printed examples (`--help`, `--cfg job`, mistyped options) are
what a user sees, and W&B stays offline unless logged in. A command added to the README fails
test_every_readme_command_is_covered until it is added to COVERED with the test that runs it."""

import itertools
import os
import re
import resource
import subprocess
import sys
import time

import pytest
import yaml
from helpers.runs import ROOT, run_dirs

from litlab.config.compose import compose

README = (ROOT / "README.md").read_text()
STARTS = ("python ", "python3", "make ", ".venv/bin/python", "PYTHONPATH=", "pip ", ". .venv")

# command (as the README prints it) -> the test that runs it (or its shortened form)
COVERED = {
    "make train": "test_readme.py::test_make_targets_run_the_documented_commands",
    "make test": "test_readme.py::test_make_targets_run_the_documented_commands",
    'make train ARGS="trainer.max_epochs=3"': "test_readme.py::test_make_targets_run_the_documented_commands",
    "python src/train.py": "test_console.py::test_default_run_prints_one_page_and_the_readme_figures",
    "python src/train.py threads=1": "test_console.py::test_default_run_prints_one_page_and_the_readme_figures",
    "python src/train.py model.net.linear_impl=tiled": "test_ops_train.py::test_trains_to_98_percent_and_resumes",
    ".venv/bin/python src/train.py ...": "test_console.py::test_default_run_prints_one_page_and_the_readme_figures",
    "python src/train.py data=mnits": "test_readme.py::test_readme_error_examples_are_what_users_see",
    "python src/train.py model=gnn data=digits": "test_readme.py::test_readme_error_examples_are_what_users_see",
    "python src/eval.py ckpt_path=logs/train/runs/<timestamp>/checkpoints/last.ckpt": "test_options.py::test_eval_split_val_scores_and_predicts_the_validation_split",
    "python src/eval.py ckpt_path=<ckpt> +data_overrides.path=other.csv": "test_eval_data.py::test_data_overrides_change_the_table_and_are_recorded",
    "python src/eval.py ckpt_path=<ckpt> +data_overrides.root=/other/masks": "test_eval_data.py::test_a_2d_models_data_root_is_changed_by_data_overrides_only",
    "python src/eval.py ckpt_path=<ckpt> +data_overrides.batch_size=512": "test_eval_data.py::test_data_overrides_change_the_table_and_are_recorded",
    "python src/train.py model=gnn": "test_graph.py::test_default_graph_needs_the_edges",
    "python src/train.py model=gnn data=cora": "test_graph.py::test_gcn_cora_offline_and_eval_reproduces",
    "python src/train.py experiment=gin_mutag data.fold=3": "test_graph.py::test_gin_mutag_folds_beat_the_majority_class",
    "python src/train.py -m experiment=gin_mutag data.fold=0,1,2,3,4,5,6,7,8,9": "test_graph.py::test_gin_mutag_folds_beat_the_majority_class",
    "PYTHONPATH=src python bench/graph_sweep.py SWEEP_DIR --curve val/acc": "test_graph.py::test_gin_mutag_folds_beat_the_majority_class",
    "python src/train.py -m experiment=gcn_cora seed=0,1,2,3,4,5,6,7,8,9": "test_graph.py::test_gcn_cora_offline_and_eval_reproduces",
    "python src/train.py -m data.num_folds=5 data.fold=0,1,2,3,4": "test_folds.py::test_a_two_fold_digits_sweep_of_two_configurations_is_compared_fold_by_fold",
    "python src/train.py -m experiment=gat_cora seed=2000,2001,2002,2003,2004,2005,2006,2007,2008,2009": "test_graph.py::test_gcn_cora_offline_and_eval_reproduces",
    "python src/train.py -m experiment=gat_citeseer seed=2000,2001,2002,2003,2004,2005,2006,2007,2008,2009": "test_graph.py::test_gcn_cora_offline_and_eval_reproduces",
    "python src/train.py model=unet3d": "test_medical3d.py::test_unet3d_on_phantoms_then_eval_writes_aligned_masks",
    "python src/train.py model=resnet3d": "test_medical3d.py::test_resnet3d_classifies_phantoms_well_above_chance",
    "python src/train.py experiment=hippocampus data.root=/path/to/Hippocampus": "test_medical3d.py::test_the_hippocampus_recipe_learns_on_four_volumes_and_eval_reproduces_it",
    "python src/train.py experiment=unet2d_hippocampus": "test_segmentation2d.py::test_the_hippocampus_slices_experiment_runs_as_printed",
    "python src/train.py model=unet2d data=masks data.root=/path/to/folder data.num_classes=3": "test_segmentation2d.py::test_a_mask_folder_trains_exports_serves_and_quantizes",
    "python src/train.py experiment=diabetes": "test_start.py::test_the_new_kind_of_docs_new_task_trains_exports_serves_and_quantizes",
    "python src/train.py experiment=diabetes data.path=/path/to/table.csv": "test_regression.py::test_a_users_csv_trains_to_its_linear_fit",
    "python src/train.py model=unet3d data=nifti data.root=/data/Task04_Hippocampus data.num_classes=3": "test_medical3d.py::test_nifti_loader_reads_msd_layout_splits_and_caches",
    "python src/train.py model=resnet3d data=medmnist3d data.flag=nodulemnist3d model.net.conv1_stride=1": "test_medical3d.py::test_medmnist3d_reads_a_local_npz_through_the_package",
    "python src/train.py model=gnn trainer=ddp": "test_ddp.py::test_ddp_per_domain_metrics_equal_single_process",
    "python src/train.py -m trainer=ddp model.optimizer.lr=0.01,0.1": "test_ddp.py::test_multirun_ddp_gives_one_dir_per_job_and_identical_rank_params",
    "python src/train.py trainer=fsdp": "test_fsdp.py::test_fsdp_on_cpu_trains_stops_and_resumes_like_an_uninterrupted_run",
    "python src/train.py -m hydra/launcher=submitit_local model.optimizer.lr=0.01,0.1": "test_launchers.py::test_every_launcher_gives_the_same_results",
    "python src/train.py -m hydra/launcher=parallel hydra.launcher.n_jobs=2 seed=1,2,3,4": "test_launchers.py::test_every_launcher_gives_the_same_results",
    "python src/train.py -m hparams_search=digits_cnn": "test_sweeps.py::test_search_resumes_after_a_kill_without_rerunning_finished_trials",
    "python src/report.py path=logs/train/runs/<timestamp>": "test_report_browser.py::test_run_report_opens_offline_with_every_plot",
    "python src/report.py path=logs/train/searches/digits_cnn": "test_report_browser.py::test_search_writes_its_report_at_the_end",
    "python src/train.py ckpt_path=last": "test_reliability.py::test_resume_after_kill_9_is_bit_identical",
    "python src/train.py ckpt_path=logs/train/runs/<run>": "test_reliability.py::test_resume_after_kill_9_is_bit_identical",
    "python src/train.py data=mnist": "test_vision.py::test_every_vision_datamodule_runs",
    "python src/train.py data=imagefolder data.root=/path/to/class_folders": "test_vision.py::test_every_vision_datamodule_runs",
    "python src/train.py model=resnet18": "test_vision.py::test_every_vision_datamodule_runs",
    "python src/train.py experiment=digits_resnet18": "test_vision.py::test_every_vision_datamodule_runs",
    "python src/train.py debug=fdr": "test_vision.py::test_every_vision_datamodule_runs",
    "python src/train.py trainer=cpu": "test_resume.py::test_continue_a_finished_run_then_branch_from_its_file",
    "python src/train.py logger=tensorboard": "test_resume.py::test_continue_a_finished_run_then_branch_from_its_file",
    "python src/train.py trainer.max_epochs=3 seed=7 model.optimizer.lr=0.01": "test_resume.py::test_continue_a_finished_run_then_branch_from_its_file",
    "python src/train.py model=resnet18 --cfg job": "test_readme.py::test_cfg_job_prints_the_config_and_runs_nothing",
    "python src/train.py --cfg job": "test_readme.py::test_cfg_job_prints_the_config_and_runs_nothing",
    "python src/train.py --help": "test_readme.py::test_help_lists_every_group_and_option",
    # the suite's own commands: .ci/run runs them
    ".venv/bin/python -m pytest -m slow": ".ci/run",
    ".venv/bin/python -m pytest -m slow tests/test_reliability.py": ".ci/run",
    ".venv/bin/python -m pytest tests/test_bad_inputs.py": ".ci/run",
    '.venv/bin/python -m pytest -m "slow or not slow" tests/test_reliability.py tests/test_bad_inputs.py': ".ci/run",
    "python -m pytest": ".ci/run",
    '.venv/bin/python -m pytest -m "slow or not slow" tests/test_reliability.py tests/test_reliability_faults.py': ".ci/run",
    ".venv/bin/python -m pytest tests/test_reliability_inputs.py": ".ci/run",
    "python src/train.py -m experiment=gin_mutag data.fold=0,1,2,3,4,5,6,7,8,9 data.val_fraction=0 "
    "callbacks.model_checkpoint=null trainer.max_epochs=100": "test_reliability_faults.py::test_xu_protocol_command_runs_under_multirun",
    "python src/train.py -m experiment=gin_proteins data.val_fraction=0 callbacks.model_checkpoint=null "
    "data.fold=0,1,2,3,4,5,6,7,8,9 data.seed=1000 seed=1000": "test_reliability_faults.py::test_xu_protocol_command_runs_under_multirun",
    # start here
    "PYTHONPATH=$PWD/src": "test_notebooks.py::test_notebook_runs",
    "make doctor": "test_start.py::test_doctor_reports_facts_and_fails_on_an_unwritable_log_dir",
    "make doctor ARGS=--json": "test_start.py::test_doctor_reports_facts_and_fails_on_an_unwritable_log_dir",
    "make new-task NAME=mytask FROM=vision": "test_start.py::test_new_task_copies_every_domain_and_touches_nothing_else",
    "python src/train.py experiment=mytask": "test_start.py::test_new_task_copies_every_domain_and_touches_nothing_else",
    "python -m pytest tests/test_mytask.py": "test_start.py::test_the_copied_test_passes",
    # install and threads
    "pip install -e .": "test_repo_basics.py::test_editable_install_imports_litlab_without_pythonpath",
    "pip install --no-deps -e .": "test_packaging.py::test_installed_metadata_has_no_tool_outside_an_extra_and_litlab_imports_anywhere",
    "make notebook": "test_packaging.py::test_make_notebook_starts_jupyterlab_on_the_venv",
    "make notebook PORT=8899 ARGS=--no-browser": "test_notebooks.py::test_make_notebook_runs_copies_and_leaves_the_tracked_notebooks_clean",
    "make train TORCH=cpu": "test_repo_basics.py::test_make_installs_cpu_torch_only_when_asked",
    "python src/train.py -m hparams_search=digits_cnn hydra.sweeper.n_trials=5 trainer.max_epochs=3": "test_study_resume.py::test_a_real_search_resumed_with_another_budget",
    # inspect
    "python src/train.py callbacks=inspect": "test_inspect.py::test_confusion_matrix_counts_the_test_set_and_matches_test_acc",
    "python src/train.py logger=mlflow": "test_inspect.py::test_mlflow_run_reads_back_with_params_metrics_and_artifacts",
    "python src/train.py profiler=pytorch": "test_inspect.py::test_pytorch_profiler_tables_name_the_convolution_and_memory",
    "python src/train.py tune=lr": "test_inspect.py::test_lr_finder_suggestion_is_in_range_and_is_the_lr_trained_with",
    "python src/train.py tune=batch_size": "test_inspect_domains.py::test_batch_size_finder_sets_the_batch_size_trained_with",
    # deploy, compress, federated
    "python src/eval.py ckpt_path=...": "test_options.py::test_eval_split_val_scores_and_predicts_the_validation_split",
    "python src/eval.py model_path=logs/export/runs/<timestamp>/model.onnx": "test_eval_exported.py::test_an_fp32_file_scores_as_its_checkpoint",
    "python src/export.py ckpt_path=logs/train/runs/<timestamp>/checkpoints/last.ckpt": "test_export.py::test_digits_formats_verified",
    "python src/serve.py model_path=logs/export/runs/<timestamp>/model.onnx": "test_serve.py::test_uploaded_images_get_eval_predictions",
    "python src/compress.py ckpt_path=PATH compress=prune compress.prune.ratio=0.1": "test_compress.py::test_pruned_net_is_smaller_evaluates_and_quantizes",
    "python src/compress.py ckpt_path=PATH compress=distill": "test_compress.py::test_distilled_student_trains_and_eval_reproduces_it",
    "python src/compress.py ckpt_path=PATH compress=quantize": "test_compress.py::test_pruned_net_is_smaller_evaluates_and_quantizes",
    "python src/compress.py ckpt_path=PATH compress=[distill,quantize]": "test_compress.py::test_every_compress_option_composes_and_chains_in_order",
    "python src/federate.py": "test_federated_ray.py::test_simulation_records_a_failing_client_and_leaves_no_process",
    "python src/federate.py -m federate.alpha=0.1,0.5,1.0": "test_federated_ray.py::test_a_federated_sweep_with_fedprox_and_int8_gives_the_usual_summary",
    "python src/federate.py federate/strategy=fedprox federate.strategy.proximal_mu=0.1": "test_federated_ray.py::test_a_federated_sweep_with_fedprox_and_int8_gives_the_usual_summary",
    "python src/federate.py federate.partition=iid federate.compression=int8": "test_federated_ray.py::test_simulation_records_a_failing_client_and_leaves_no_process",
    "python src/federate.py ckpt_path=last": "test_federated_runs.py::test_a_stopped_run_resumes_to_the_same_global_weights_bit_for_bit",
}
# needs hardware or set-up this suite cannot have: composed only (test_every_train_command_composes)
NOT_RUN = {
    "python src/train.py trainer=gpu": "needs a GPU (bench/gpu.py runs it on a lent GPU)",
    "python src/train.py trainer=ddp trainer.devices=4 trainer.num_nodes=2": "needs 8 devices "
    "on 2 nodes (the ranks it starts: test_ddp.py::test_which_ddp_runs_start_their_ranks_early)",
    "python src/train.py threads=2": "a run like any other; the count it sets is checked in "
    "process (test_threads.py::test_omp_num_threads_wins_over_auto_and_explicit_counts_win_over_both)",
    "python3.11 -m venv .venv": "set-up (make creates .venv the same way)",
    ". .venv/bin/activate": "set-up",
    "pip install -r requirements.lock": "set-up (make's .venv/.installed step installs this lock, "
    "with uv: test_packaging.py::test_the_lock_is_requirements_txt_resolved_with_every_package_pinned)",
    "pip install -r requirements.txt": "the CPU route without make: pip resolves the direct pins "
    "around PyTorch's CPU build (make's TORCH=cpu route is checked with make -n)",
    "pip config list": "pip's own settings, read by make's set-up: "
    "test_repo_basics.py::test_uv_gets_the_package_sources_pip_is_configured_with",
    "make lock": "needs the package index: a fresh pip resolution of requirements.txt "
    "(test_packaging.py checks the lock it wrote against requirements.txt and .venv)",
    "make bench": "benchmarks, not a check (BENCHMARKS.md)",
    "make coverage": "the whole suite again under coverage.py; its settings count a subprocess's "
    "lines (test_repo_basics.py::test_make_coverage_counts_the_code_a_subprocess_runs)",
    "pip install -e '.[dev,federated,mlflow,medmnist]'": "needs the package index (the extras "
    "it names are checked against the lock by test_packaging.py::test_dependencies_and_extras_are_the_lock)",
    "pip install --index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1": "needs PyTorch's own index (make's TORCH=cpu route is checked with make -n)",
}


def readme_commands(text: str = README) -> list[str]:
    """Commands in code blocks (a `$ ` prompt and trailing `# comments` stripped) and in inline
    code that starts like a command; whitespace normalized, first occurrence kept."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ ")).strip()
            if line.startswith(STARTS):
                found += [part.strip() for part in line.split("&&")]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    found += [code for code in re.findall(r"`([^`\n]+)`", prose) if code.startswith(STARTS)]
    return list(dict.fromkeys(re.sub(r"\s+", " ", c) for c in found))


def test_readme_command_extraction_finds_every_form():
    text = (
        "```bash\nmake x   # note\npython a.py && pip b\n```\n```\n$ python src/train.py q=1\n"
        "error: ...\n```\nprose `python src/train.py k=v` and `key=value`"
    )
    assert readme_commands(text) == [
        "make x",
        "python a.py",
        "pip b",
        "python src/train.py q=1",
        "python src/train.py k=v",
    ]


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_is_covered(command):
    """Each README command names the test that runs it; that test exists."""
    assert command in COVERED or command in NOT_RUN, (
        f"README command {command!r} is run by no test: add a test and list it in COVERED"
    )
    if command in COVERED and COVERED[command] != ".ci/run":
        file, name = COVERED[command].split("::")
        assert re.search(rf"^def {name}\(", (ROOT / "tests" / file).read_text(), re.MULTILINE), (
            f"{COVERED[command]} does not exist"
        )


def overrides_of(command: str) -> list[str]:
    """A README train.py command as compose overrides: placeholders filled, flags dropped, the
    first value of each sweep list."""
    words = command.replace("<timestamp>", "2026-01-01_00-00-00").replace("<run>", "run").split()
    out = []
    for before, word in itertools.pairwise(words[1:]):
        if word.startswith("-") or word == "..." or before == "--cfg":
            continue
        key, _, value = word.partition("=")
        if "," in value and "(" not in value and "[" not in value:
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out


TRAIN_COMMANDS = [
    c
    for c in readme_commands()
    if c.startswith("python src/train.py")
    and c
    not in (
        "python src/train.py data=mnits",
        "python src/train.py model=gnn data=digits",
        # exists after `make new-task NAME=mytask` (test_start.py)
        "python src/train.py experiment=mytask",
    )
]


@pytest.mark.parametrize("command", TRAIN_COMMANDS)
def test_every_train_command_composes(command, tmp_path):
    """The keys and options the README names exist (a renamed key breaks this at once)."""
    from omegaconf import OmegaConf

    cfg = compose("train", overrides_of(command), output_dir=tmp_path)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation the command leads to
    for override in overrides_of(command):
        key, value = override.split("=", 1)
        if "/" not in key and not key.startswith(("hydra", "+")) and "." in key:
            expected = None if value == "null" else value.strip("'\"")
            got = OmegaConf.select(cfg, key)
            assert got is None if expected is None else str(got) == expected, override


def cli_cpu(*args: str, log_dir) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `python src/train.py args`; (process, wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), f"paths.log_dir={log_dir}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def readme_error_examples() -> list[tuple[str, str]]:
    """(`$ python src/train.py ...`, the `error:` line printed below it) in README blocks."""
    return re.findall(r"^\$ (python src/train\.py [^\n]+)\n(error: [^\n]+)$", README, re.MULTILINE)


def test_readme_error_examples_are_what_users_see(tmp_path):
    """The README's error lines are what users get. A mistyped option, as a user types it: the
    line alone on stderr, exit 2, no run dir, and 'about a second', checked as CPU time (on a
    loaded machine the wall time is a multiple of it: 0.4 s CPU, 2 s wall at load 6). The
    model/data mismatch is checked in process (its exit and single line: test_bad_inputs.py;
    as a subprocess it costs 8 s CPU: the check imports the data classes)."""
    from litlab.config import build
    from litlab.errors import UserError

    examples = dict(readme_error_examples())
    assert set(examples) == {
        "python src/train.py data=mnits",
        "python src/train.py model=gnn data=digits",
    }
    line = examples["python src/train.py data=mnits"]
    proc, wall, cpu = cli_cpu("data=mnits", log_dir=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == line, proc.stderr[-2000:]
    assert run_dirs(tmp_path) == [], "a run dir was left behind"
    assert cpu < 2.0 and wall < 20, f"{cpu:.1f} s CPU, {wall:.1f} s wall"

    cfg = compose("train", ["model=gnn", "data=digits"], output_dir=tmp_path / "run")
    with pytest.raises(UserError) as error:
        build.check_compatible(cfg)
    assert f"error: {error.value}" == examples["python src/train.py model=gnn data=digits"]


def test_help_lists_every_group_and_option(tmp_path):
    proc, wall, cpu = cli_cpu("--help", log_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = dict(
        re.findall(r"^([a-z_/]+): (.+)$", proc.stdout.split("== Config ==")[0], re.MULTILINE)
    )
    for group in ("data", "model", "trainer", "logger", "debug", "experiment", "hparams_search"):
        options = sorted(p.stem for p in (ROOT / "configs" / group).glob("*.yaml"))
        assert listed[group].split(", ") == options, group
    assert cpu < 3.0 and wall < 30, f"--help took {cpu:.1f} s CPU, {wall:.1f} s wall"


def test_cfg_job_prints_the_config_and_runs_nothing(tmp_path):
    proc, _, _ = cli_cpu("model=resnet18", "--cfg", "job", log_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["model"]["net"]["_target_"] == "litlab.domains.vision.nets.resnet18"
    assert cfg["data"]["_target_"] == "litlab.domains.vision.data.DigitsDataModule"
    assert {"trainer", "callbacks", "logger", "paths", "seed"} <= set(cfg) and "hydra" not in cfg
    assert not (tmp_path / "train").exists(), "--cfg job ran something"


@pytest.mark.parametrize(
    "script, required",
    [
        ("train.py", []),
        ("eval.py", ["ckpt_path=x.ckpt"]),
        ("export.py", ["ckpt_path=x.ckpt"]),
        ("serve.py", ["model_path=x.onnx"]),
        ("compress.py", ["ckpt_path=x.ckpt"]),
        ("federate.py", []),
    ],
)
def test_every_entry_point_resolves_its_default_paths(script, required, tmp_path):
    """Without `paths.log_dir=` (as the README's commands are typed): the resolvers the paths
    use are registered for every entry point (export.py and serve.py once lacked them)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / script), *required, "--cfg", "job", "--resolve"]
        + ["--package", "paths"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    paths = yaml.safe_load(proc.stdout)
    assert paths["log_dir"] == str(ROOT / "logs") and paths["data_dir"] == str(ROOT / "data")


def test_make_targets_run_the_documented_commands():
    """`make train ARGS=...` passes ARGS to src/train.py; `make test` runs pytest (dry runs)."""

    def dry(*args):
        proc = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    assert ".venv/bin/python src/train.py trainer.max_epochs=3" in dry(
        "train", "ARGS=trainer.max_epochs=3"
    )
    assert ".venv/bin/python src/train.py " in dry("train")
    assert any(line.startswith(".venv/bin/python -m pytest") for line in dry("test"))
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and '-m "slow and not bench"' in ci and "set -euo pipefail" in ci


@pytest.mark.parametrize(
    ("env", "netrc", "offline"),
    [
        ({}, None, True),  # no account: offline
        ({}, "machine api.wandb.ai\n  login user\n  password KEY\n", False),  # `wandb login`
        ({"WANDB_API_KEY": "KEY"}, None, False),
        ({"WANDB_API_KEY": "KEY", "WANDB_MODE": "offline"}, None, True),  # forced either way
        ({"WANDB_MODE": "online"}, None, False),
    ],
)
def test_wandb_is_offline_unless_logged_in(env, netrc, offline, tmp_path, monkeypatch):
    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    if netrc:
        (tmp_path / ".netrc").write_text(netrc)
    cfg = compose("train", ["logger=wandb"], output_dir=tmp_path / "run")
    assert cfg.logger.wandb.offline is offline
