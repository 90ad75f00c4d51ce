"""A resumed Optuna study must train its new trials as its first trials were trained.

The command's overrides that are not searched (`trainer.max_epochs=3`, `data.fold=2`, ...) are
stored with the study (a user attribute) when it is created. A later command that resumes the
study with other values would mix trials of different budgets and rank them together, with
Optuna's "Using an existing study" as the only sign; it is refused in one line instead, unless
resumed on purpose (`hydra.sweeper.strict_resume=false`). Keys that only say where files go or
how much is printed (paths, hydra, extras, loggers, threads, progress bars) may differ, so
workers on other machines can share a study.
"""

import logging

from litlab.errors import UserError

log = logging.getLogger(__name__)
ATTR = "fixed_overrides"
MACHINE_LOCAL = (
    "paths.",
    "hydra.",
    "extras.",
    "logger",
    "threads",
    "ddp_join_timeout",
    "callbacks.rich_progress_bar",
    "callbacks.model_summary",
)


def override_settings(overrides: list[str], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """`["trainer.max_epochs=3", "~callbacks.x"]` -> `{"trainer.max_epochs": "3",
    "callbacks.x": "(deleted)"}`, leaving out keys that start with one of `skip`."""
    settings = {}
    for override in overrides:
        key, _, value = override.partition("=")
        name = key.lstrip("+~")
        if not name.startswith(skip):
            settings[name] = "(deleted)" if key.startswith("~") else value
    return settings


def check_study(study, fixed: list[str], strict: bool = True) -> None:
    """Store the settings with a new study; compare them with a resumed one's (see above)."""
    current = override_settings(fixed, skip=MACHINE_LOCAL)
    stored = study.user_attrs.get(ATTR)
    if stored is None:  # a new study (or one from before this check): these are its settings
        study.set_user_attr(ATTR, current)
        return
    differ = sorted(k for k in stored.keys() | current.keys() if stored.get(k) != current.get(k))
    if not differ:
        return
    changes = ", ".join(
        f"{k}={stored.get(k, '(not set)')} then, {current.get(k, '(not set)')} now" for k in differ
    )
    name = study.study_name
    if strict:
        raise UserError(
            f"study {name} was started with other settings ({changes}): its trials would not be "
            f"comparable. Start a new study with hydra.sweeper.study_name={name}_2, rerun with "
            "the study's settings, or mix them on purpose with hydra.sweeper.strict_resume=false"
        )
    log.warning("study %s resumed with other settings on purpose (%s)", name, changes)
