"""The commands litlab prints (`resume it with: ...`, `run the rest with: ...`, `train it again
with: ...`), made in one place and read back from stored files in one place.

- `command` makes one: `python src/<entry>.py [-m] <overrides>`, every word quoted for a POSIX
  shell (`shlex.join`), so that an override holding spaces, quotes, `;` or `$` reaches Hydra
  as it was given when the line is pasted.
- `stored` reads one back from a file a sweep or a run left (`sweep_plan.json`, a lock file):
  such a file may have been copied, edited or crafted, so its text is printed only when it is
  a command `command` could have made (the same words, quoted the same way) of one of this
  project's entry points, with Hydra overrides that name no code to run and read no configs
  from elsewhere (`stored` says each check). Anything else is `Untrusted`, with the reason,
  for the caller's refusal to name.
Plain Python only (a Hydra callback prints them for every sweep).
"""

import re
import shlex
import unicodedata

ENTRY_POINTS = ("train", "eval", "export", "serve", "compress", "federate", "report")
MULTIRUN = "-m"
MAX_CHARS = 100_000
# a Hydra override: `key=value`, `+key=value`, `++key=value`, `~key[=value]`, `group/opt=x`,
# `model@compress.distill.student=cnn`; the value may be anything (it is quoted)
OVERRIDE = re.compile(r"(?:\+\+|\+|~)?[A-Za-z_][\w.@/-]*(?:=.*)?", re.DOTALL)
# what names code to run or configs from elsewhere: never printed from a stored file (a class
# to build, a config search path, a job's environment, shell lines a launcher runs first)
CODE_KEYS = re.compile(r"^hydra\.(?:searchpath|job\.env_set|launcher\.setup)(?:\.|$)")
CODE_WORD = "_target_"
# resolvers that parse YAML, where `_target_` can be spelled in escapes (`"\x5ftarget_"`)
YAML_RESOLVERS = re.compile(r"\boc\.(?:create|decode)\b")


class Untrusted(ValueError):
    """A stored command that litlab does not print; its text says why."""


def command(entry: str, overrides, multirun: bool = False) -> str:
    """`python src/<entry>.py [-m] <overrides>`, each word quoted for the shell."""
    words = ["python", f"src/{entry}.py", *([MULTIRUN] if multirun else [])]
    return shlex.join([*words, *(str(o) for o in overrides)])


def override(key: str, value) -> str:
    """`key=value` as one shell word (a message's `resume with ckpt_path=<a path>`)."""
    return shlex.quote(f"{key}={value}")


def _visible(text: str) -> str | None:
    """The first control, format or unassigned character of `text` (newlines, escape codes,
    right-to-left marks: what would make a printed line say other than it does), else None."""
    return next((c for c in text if unicodedata.category(c).startswith("C")), None)


def _key(word: str) -> str:
    return word.split("=", 1)[0].lstrip("+~")


def stored(text, entry: str | None = None, multirun: bool | None = None) -> list[str]:
    """The words of a stored command that litlab may print (see the module docstring), else
    `Untrusted`. `entry`/`multirun`: what the command must be (None: any entry point)."""
    if not isinstance(text, str) or not text.strip():
        raise Untrusted("it holds no command")
    if len(text) > MAX_CHARS:
        raise Untrusted(f"its command is over {MAX_CHARS} characters")
    if (char := _visible(text)) is not None:
        raise Untrusted(f"its command holds the control character {char!a}")
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise Untrusted(f"its command is not shell words ({err})") from None
    if shlex.join(words) != text:  # unquoted shell syntax: `;`, `&&`, `$(...)`, `|`, `~`, ...
        raise Untrusted("its command holds shell syntax, not only quoted words")
    program = words[:2]
    entries = ENTRY_POINTS if entry is None else (entry,)
    if program not in (["python", f"src/{e}.py"] for e in entries):
        raise Untrusted(f"its command does not start with python src/<{'|'.join(entries)}>.py")
    rest = words[2:]
    if multirun is not None and (MULTIRUN in rest) != multirun:
        raise Untrusted(f"its command {'lacks' if multirun else 'has'} {MULTIRUN}")
    for word in rest:
        if word == MULTIRUN:
            continue
        if not OVERRIDE.fullmatch(word) or ("=" not in word and not word.startswith("~")):
            raise Untrusted(f"its command holds {word[:60]!r}, not a Hydra override")
        if CODE_KEYS.match(_key(word)) or CODE_WORD in word:
            raise Untrusted(f"its command sets {_key(word)[:60]}, which names code to run")
        if YAML_RESOLVERS.search(word):
            raise Untrusted(f"its command parses YAML in {_key(word)[:60]} (a class to build)")
    if rest.count(MULTIRUN) > 1:
        raise Untrusted(f"its command has {MULTIRUN} twice")
    return words


def printable(text, entry: str | None = None, multirun: bool | None = None) -> str:
    """`text` when `stored` accepts it (then it is exactly its words quoted), else `Untrusted`."""
    stored(text, entry, multirun)
    return text


def with_override(words: list[str], key: str, value: str) -> str:
    """The command of `words` (from `stored`) with `key` set to `value` (added if absent),
    quoted again: e.g. a moved sweep's own command with the sweep dir where it is now."""
    kept = [w for w in words if _key(w) != key or w == MULTIRUN]
    return shlex.join([*kept, f"{key}={value}"])
