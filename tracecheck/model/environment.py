"""A report's environment read as typed fields (``RunReport.env``): what every renderer reads, so none of them knows
the environment dict's keys. The report's JSON keeps the dict as tracecheck/machine.collect (and
gate/shards.merge) wrote it (docs/report-schema.md); this is its one reader. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .reportio import flag, obj, text, texts


@dataclass(frozen=True)
class Environment:
    """The environment of one run, typed. A missing key is the field's default; a value of the wrong shape (a
    hand-edited report) reads as missing."""

    torch: str | None = None
    python: str | None = None
    platform: str | None = None
    machine: str | None = None
    #: the device probes ran on (``cpu``, ``cuda:1``, ``npu``)
    device: str | None = None
    #: --emulate-npu: the PrivateUse1 device on CPU memory, never an NPU; ``device_label`` says so
    emulated: bool = False
    device_label: str | None = None
    cuda_available: bool | None = None
    #: the CUDA version torch was built with; None: a build without CUDA
    cuda: str | None = None
    #: torch_npu's version where it is installed, whether an NPU is there, CANN's version
    torch_npu: str | None = None
    npu_available: bool | None = None
    cann: str | None = None
    #: why there is no NPU (environment.npu_status's ``error``)
    npu_note: str | None = None
    #: torch.utils.collect_env's fields (environment.COLLECT_ENV_FIELDS' names) as text; empty where not collected
    collect_env: dict[str, str] = field(default_factory=dict)
    #: why collect_env recorded nothing
    collect_env_error: str | None = None
    #: a report merged from shards (gate/shards.py): the torch versions and rootdirs of its parts, where they differ
    merged_torch_versions: tuple[str, ...] = ()
    merged_rootdirs: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "Environment":
        d = obj(d)

        ce = obj(d.get("collect_env"))
        return cls(torch=text(d.get("torch")), python=text(d.get("python")), platform=text(d.get("platform")),
                   machine=text(d.get("machine")), device=text(d.get("device")), emulated=d.get("emulated") is True,
                   device_label=text(d.get("device_label")), cuda_available=flag(d.get("cuda_available")),
                   cuda=text(d.get("cuda")), torch_npu=text(d.get("torch_npu")), npu_available=flag(d.get("npu_available")),
                   cann=text(d.get("cann")), npu_note=text(d.get("npu_note")),
                   # a field's value is text or a flag (is_cuda_available); an error leaves only itself
                   collect_env={str(k): str(v) for k, v in ce.items() if k != "error" and v is not None},
                   collect_env_error=text(ce.get("error")),
                   merged_torch_versions=texts(d.get("merged_torch_versions")), merged_rootdirs=texts(d.get("merged_rootdirs")))

    @property
    def device_text(self) -> str:
        """The device a run used, as every report names it: an emulated one says so (never taken for the real
        one)."""
        device = self.device or "?"
        return f"{device}: {self.device_label or 'emulated'}" if self.emulated else device
