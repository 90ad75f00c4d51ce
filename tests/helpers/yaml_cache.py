"""Parse each config file's text once per worker (issue #49): the checks that compose a config
in the process (refusals, validations, `--cfg job`) load the same ~20 YAML files of
configs/ and of Hydra's own package on every composition, and the pure-Python YAML parser and
OmegaConf's node building of those files were about a third of such a check's CPU.

`composition_caches` is an autouse fixture of every test module (conftest.py) that installs
the caches of a composition: this module's two, compose_cache.py's defaults trees and
debugger_check.py's stand-in. While its checks run, `OmegaConf.load` is wrapped by a cache
keyed by the file's full text, so an edited or new file (a test's own --config-dir, a changed
experiment) is parsed again, and every caller gets its own copy (unpickled: several times
faster than a deep copy), so no check sees what another changed in a loaded config. A text that
does not parse is never cached: its error is raised as before, by OmegaConf itself.

The same fixture keeps OmegaConf's parse trees of interpolation strings (`${paths.log_dir}`,
`${oc.env:...}`): OmegaConf parses such a string with its ANTLR grammar each time a node that
holds it is resolved, about 95 times in one refused `train.py` command, for some 25 distinct
strings. `omegaconf.base.parse`, the function resolution calls, is wrapped by a cache keyed by
the string, the grammar rule and the lexer mode; a parse tree is syntax only (which config it
resolves in is the resolver's business), read and never changed by OmegaConf's visitor, and a
string that does not parse raises on every call (errors are not cached). User CPU of
tests/test_refusals.py + tests/test_configs.py in one process: 52.4 s without, 46.8 s with it."""

import functools
import os
import pickle

import pytest
from omegaconf import OmegaConf, base, grammar_parser

from helpers import compose_cache, debugger_check

_load = OmegaConf.load  # the real one, called on every miss
_parsed: dict[str, bytes] = {}  # file text -> the config OmegaConf made of it, pickled


def _text(file_) -> tuple[str | None, int | None]:
    """(the text OmegaConf.load would parse, where a stream's text starts); (None, None): not a
    file. A stream is left at its end, as the real load leaves it."""
    if isinstance(file_, (str, os.PathLike)):
        with open(os.path.abspath(file_), encoding="utf-8") as f:
            return f.read(), None
    if callable(getattr(file_, "read", None)) and callable(getattr(file_, "seek", None)):
        start = file_.tell()
        text = file_.read()
        return (text.decode("utf-8") if isinstance(text, bytes) else text), start
    return None, None


def cached_load(file_):
    """`OmegaConf.load(file_)`, parsed once per distinct text; a fresh copy each call."""
    try:
        text, start = _text(file_)
    except OSError:
        text, start = None, None  # a missing file: the real load raises its own error
    if text is None:
        return _load(file_)
    if text not in _parsed:
        if start is not None:
            file_.seek(start)
        _parsed[text] = pickle.dumps(
            _load(file_)
        )  # the real parse, with its error messages and file name
    return pickle.loads(_parsed[text])


#: OmegaConf's parse of an interpolation string, once per distinct (string, rule, mode)
cached_parse = functools.lru_cache(maxsize=4096)(grammar_parser.parse)


@pytest.fixture(autouse=True, scope="module")
def composition_caches():
    """Module-scoped, so that the module's own fixtures (a trained run, a sweep) compose with
    the cache too; the real `OmegaConf.load` is back once the module's checks are done."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(OmegaConf, "load", staticmethod(cached_load))
        patch.setattr(base, "parse", cached_parse)
        compose_cache.install(patch)  # and each defaults tree merged once: compose_cache.py
        debugger_check.install(patch)  # and no source read to tell a debugger: debugger_check.py
        yield
