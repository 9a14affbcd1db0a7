"""The backend conformance suite: the checks every backend plugin runs against its own models.

Like fsspec's abstract test classes, which run against each filesystem implementation, a
backend's tests subclass :class:`BackendConformance`, say what the backend is and how to
build its models, and pytest collects the inherited ``test_*`` methods for that backend::

    from despina.testing.conformance import BackendConformance

    class TestOnnxConformance(BackendConformance):
        __test__ = True
        backend = "onnxruntime"
        distribution = "despina-backend-onnx"
        entry_point_module = "despina_backend_onnx.plugin"
        platforms = ("onnxruntime_onnx",)
        default_model_filename = "model.onnx"
        framework_modules = ("onnxruntime",)

        def backend_class(self): ...
        def add_sub_files(self, scratch): ...
        def identity_model(self, scratch, datatype): ...
        def corrupt_models(self, scratch): ...
        def rejecting_model(self, scratch): ...

Every check is real: a server on 127.0.0.1 (ephemeral ports), real ``tritonclient`` HTTP
and gRPC clients (the fixtures of :mod:`despina.testing`), models built by the test. A
check the backend cannot take is named in :attr:`BackendConformance.unsupported` with the
reason, and is skipped with that reason, never passed.

Model files are given relative to the version folder (``{"model.onnx": b"..."}``); the
suite puts them under ``1/`` (or another version). Imported by backend test modules only,
it still imports nothing heavy at module level (numpy, tritonclient and the server are
imported by the checks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

if TYPE_CHECKING:
    from despina.testing import RepositoryBuilder, RunningServer

    Start = Callable[..., RunningServer]

#: Files of one model version, relative to the version folder.
Files = Mapping[str, "str | bytes"]

#: Every Triton datatype, in the order the round-trip check is parametrized.
DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
)

#: Features a backend may lack (keys of ``unsupported``, besides the datatypes).
AUTOCOMPLETE = "autocomplete"  # fills a config without inputs/outputs from the model file
NO_CONFIG = "no_config"  # serves a model folder holding no config.pbtxt at all
DEFAULT_MAX_BATCH_SIZE = "default_max_batch_size"  # honours --backend-config default-max-batch-size
CONFIG_CHECK = "config_check"  # checks config inputs (names, dims, types) against the model
LAZY_IMPORT = "lazy_import"  # its entry-point module leaves a framework unimported
FEATURES = (AUTOCOMPLETE, NO_CONFIG, DEFAULT_MAX_BATCH_SIZE, CONFIG_CHECK, LAZY_IMPORT)

#: How the config disagrees with the model in the config-check cases: INPUT0 with dims
#: [5], with dims [2, 2], as TYPE_FP64, renamed IMAGE; INPUT1 left out; OUTPUT0 renamed SCORES.
MISMATCHES = ("dims", "rank", "data_type", "unknown_input", "missing_input", "unknown_output")

#: Serve the models that load when others fail (tritonserver's default is to exit).
KEEP_GOING = ("--exit-on-error=false",)


@dataclass(frozen=True)
class BuiltModel:
    """A model a hook built: files of its version folder, the ``config.pbtxt`` text (None:
    no config file, the backend auto-completes), and the names of its inputs/outputs."""

    files: Files
    config: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class RejectingModel:
    """A batching model that fails some requests at run time (a bad index, a negative
    value, mismatched lengths).

    ``config`` is the full config with ``max_batch_size`` >= 4 and no ``dynamic_batching``,
    ``instance_group`` or ``model_warmup`` (the suite adds those). ``good`` and ``bad`` are
    requests of batch size 1 or more whose first sample decides; ``expected`` is what
    ``good`` returns; each text of ``errors`` is in the error of a ``bad`` request and in
    the reason of a warm-up on ``bad``'s first sample.
    """

    files: Files
    config: str
    good: Mapping[str, Any]
    bad: Mapping[str, Any]
    expected: Mapping[str, Any]
    errors: tuple[str, ...] = field(default=())


class BackendConformance:
    """The checks every backend runs. Subclass it in a module named ``test_*.py`` as a class
    named ``Test*``, set ``__test__ = True`` and fill the attributes and hooks below."""

    __test__ = False  # the base class holds no backend: collect only its subclasses

    #: The backend's name (config ``backend:``, the entry-point name).
    backend: ClassVar[str]
    #: The distribution registering it (``despina-backend-...``).
    distribution: ClassVar[str]
    #: The module the entry point names.
    entry_point_module: ClassVar[str]
    #: The platforms it serves (config ``platform:``).
    platforms: ClassVar[tuple[str, ...]] = ()
    #: The model file looked for in a version folder.
    default_model_filename: ClassVar[str]
    #: Modules importing the entry-point module must not import (the framework).
    framework_modules: ClassVar[tuple[str, ...]] = ()
    #: Feature (one of FEATURES) or datatype -> why this backend cannot take that check.
    unsupported: ClassVar[Mapping[str, str]] = {}
    #: Input and output names of the add/sub model, in order.
    add_sub_inputs: ClassVar[tuple[str, str]] = ("INPUT0", "INPUT1")
    add_sub_outputs: ClassVar[tuple[str, str]] = ("OUTPUT0", "OUTPUT1")
    #: The instance kind of the checks that state an ``instance_group`` (``KIND_GPU`` for a
    #: backend serving GPU instances only).
    instance_kind: ClassVar[str] = "KIND_CPU"

    #: What a collected subclass must set, and the hooks it must override.
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "backend",
        "distribution",
        "entry_point_module",
        "default_model_filename",
    )
    HOOKS: ClassVar[tuple[str, ...]] = (
        "backend_class",
        "add_sub_files",
        "identity_model",
        "corrupt_models",
        "corrupt_reason",
        "rejecting_model",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that opts in to collection (``__test__ = True``) without every
        attribute and hook fails at import, naming what it lacks."""
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("__test__", False):
            return
        missing = [name for name in cls.REQUIRED if not hasattr(cls, name)]
        missing += [
            f"{name}()"
            for name in cls.HOOKS
            if getattr(cls, name) is getattr(BackendConformance, name)
        ]
        if missing:
            raise TypeError(f"{cls.__name__} lacks {', '.join(missing)}")

    # -- hooks -------------------------------------------------------------------------

    def backend_class(self) -> type:
        """The Backend class the entry point must yield."""
        raise NotImplementedError

    def config_header(self) -> str:
        """The config lines naming the backend (and any setting every model needs)."""
        return f'backend: "{self.backend}"\n'

    def add_sub_files(self, scratch: Path) -> Files:
        """An add/sub model's files: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
        (names from ``add_sub_inputs``/``add_sub_outputs``), FP32 ``[batch, 4]`` with a
        dynamic batch dimension. ``scratch`` is an empty folder the hook may use."""
        raise NotImplementedError

    def autocomplete_model(self, scratch: Path) -> BuiltModel:
        """The add/sub model with the least config the backend auto-completes from (None
        where it needs none): the suite expects max_batch_size 4, dynamic batching and
        both inputs as FP32 ``[4]``."""
        return BuiltModel(
            self.add_sub_files(scratch), None, self.add_sub_inputs, self.add_sub_outputs
        )

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        """A model whose one output gives back its one input of ``datatype`` (see
        :meth:`identity_shape` and :meth:`identity_expected`)."""
        raise NotImplementedError

    def identity_shape(self, datatype: str) -> tuple[int, ...]:
        """The shape of the tensor the round trip of ``datatype`` sends."""
        return (2, 3)

    def identity_expected(self, datatype: str, sent: Any) -> Any:
        """What the identity model answers to ``sent``."""
        return sent

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        """Case name -> files of a model the backend cannot load (empty, garbage, ...)."""
        raise NotImplementedError

    def corrupt_reason(self, model: str, case: str) -> str:
        """Text the UNAVAILABLE reason of the corrupt model ``model`` (case ``case``) holds."""
        raise NotImplementedError

    def missing_file_reason(self, model: str) -> str:
        """Text the reason of a model whose version folder lacks the model file holds."""
        return f"model '{model}': model file '1/{self.default_model_filename}' not found"

    def mismatch_reasons(self, model: str, case: str) -> list[str]:
        """Texts the reason holds when the add/sub config disagrees with the model file
        (the cases of :data:`MISMATCHES`)."""
        first, second = self.add_sub_inputs
        texts = {
            "dims": [f"input '{first}' has shape [-1,4] in the model but [-1,5] in the config"],
            "rank": [f"input '{first}'", "[-1,4] in the model", "[-1,2,2] in the config"],
            "data_type": [f"input '{first}' has data type TYPE_FP64 in the config but TYPE_FP32"],
            "unknown_input": ["config input 'IMAGE' is not an input of the model"],
            "missing_input": [f"input(s) '{second}' are missing from the config"],
            "unknown_output": ["config output 'SCORES' is not an output"],
        }
        return [f"model '{model}', file '1/{self.default_model_filename}'", *texts[case]]

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        """A model that fails some requests at run time; see :class:`RejectingModel`."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------

    def require(self, *needs: str) -> None:
        """Skip the check, with the backend's reason, when it lacks one of ``needs``."""
        for need in needs:
            if need in self.unsupported:
                pytest.skip(f"{self.backend} backend lacks {need}: {self.unsupported[need]}")

    def add_sub_config(
        self, *, max_batch_size: int = 8, outputs: Sequence[str] | None = None, extra: str = ""
    ) -> str:
        """A full add/sub config (FP32 ``[4]`` tensors) with ``extra`` lines appended."""

        def tensors(names: Sequence[str]) -> str:
            return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}' for n in names)

        listed = self.add_sub_outputs if outputs is None else outputs
        return (
            f"{self.config_header()}max_batch_size: {max_batch_size}\n"
            f"input [ {tensors(self.add_sub_inputs)} ]\noutput [ {tensors(listed)} ]\n{extra}"
        )

    @staticmethod
    def add_model(
        repository: RepositoryBuilder,
        name: str,
        config: str | None,
        files: Files,
        version: str = "1",
        extra_files: Files | None = None,
    ) -> Path:
        """Add model ``name``: ``files`` in version folder ``version``, ``extra_files``
        relative to the model folder (warm-up data)."""
        placed = {f"{version}/{k}": v for k, v in files.items()}
        return repository.add(name, config, {**placed, **(extra_files or {})})

    def add_add_sub(
        self, repository: RepositoryBuilder, name: str, config: str | None, version: str = "1"
    ) -> Path:
        """Add the add/sub model as ``name`` with ``config``."""
        files = self.add_sub_files(repository.root.parent / f"scratch-{name}")
        return self.add_model(repository, name, config, files, version)

    @staticmethod
    def scratch(repository: RepositoryBuilder) -> Path:
        """A folder beside the repository where hooks may write files."""
        return repository.root.parent / "scratch"

    def add_sub_request(self, batch: int, seed: int = 0) -> dict[str, Any]:
        import numpy as np

        rng = np.random.default_rng(seed)
        return {n: rng.standard_normal((batch, 4), dtype=np.float32) for n in self.add_sub_inputs}

    def check_add_sub(
        self, outputs: Mapping[str, Any], inputs: Mapping[str, Any], names: Sequence[str] = ()
    ) -> None:
        """``outputs`` are the sum and difference of ``inputs`` (exactly, FP32)."""
        import numpy as np

        a, b = (inputs[n] for n in (names or self.add_sub_inputs)[:2])
        total, difference = self.add_sub_outputs
        assert outputs[total].shape == a.shape
        np.testing.assert_array_equal(outputs[total], a + b)
        np.testing.assert_array_equal(outputs[difference], a - b)

    # -- the plugin --------------------------------------------------------------------

    def test_unsupported_lists_known_checks_with_reasons(self) -> None:
        unknown = set(self.unsupported) - set(FEATURES) - set(DATATYPES)
        assert not unknown, f"unknown keys in unsupported: {sorted(unknown)}"
        assert all(reason.strip() for reason in self.unsupported.values())

    def test_discovered_through_entry_point(self) -> None:
        from importlib.metadata import entry_points

        from despina.plugin.manager import create_plugins

        package = self.entry_point_module.split(".")[0]
        names = [ep.name for ep in entry_points(group="despina") if ep.value.startswith(package)]
        assert names == [self.backend]
        cls, origin = create_plugins().capabilities("despina_backends")[self.backend]
        assert cls is self.backend_class()
        assert origin.distribution == self.distribution
        assert cls.name == self.backend
        assert tuple(cls.platforms) == tuple(self.platforms)
        assert cls.default_model_filename == self.default_model_filename

    def test_entry_point_module_does_not_import_the_framework(self) -> None:
        import subprocess
        import sys

        self.require(LAZY_IMPORT)
        assert self.framework_modules, "name the framework modules or mark lazy_import unsupported"
        code = (
            f"import sys, {self.entry_point_module}; "
            f"print(sorted(m for m in {list(self.framework_modules)!r} if m in sys.modules))"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
        )
        assert result.stdout.strip() == "[]", f"imported at entry: {result.stdout.strip()}"

    # -- serving -----------------------------------------------------------------------

    def test_serves_over_http(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        self.add_add_sub(model_repository, "add_sub", self.add_sub_config())
        client = served(despina_server(model_repository.root, ["--disable-auto-complete-config"]))
        assert client.client.is_model_ready("add_sub")
        inputs = self.add_sub_request(3)
        outputs = client.infer("add_sub", inputs)
        assert sorted(outputs) == sorted(self.add_sub_outputs)
        self.check_add_sub(outputs, inputs)

    def test_serves_over_grpc(
        self, model_repository: RepositoryBuilder, despina_server: Start, grpc_client: Any
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.add_add_sub(model_repository, "add_sub", self.add_sub_config())
        client = grpc_client(despina_server(model_repository.root))
        assert client.is_model_ready("add_sub")
        inputs = self.add_sub_request(2)
        items = []
        for name, array in inputs.items():
            item = grpcclient.InferInput(name, list(array.shape), "FP32")
            item.set_data_from_numpy(array)
            items.append(item)
        result = client.infer("add_sub", items)
        self.check_add_sub({n: result.as_numpy(n) for n in self.add_sub_outputs}, inputs)

    def test_statistics_split_compute_into_input_infer_and_output(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        """The backend reports when its framework call began and ended: the statistics
        extension (HTTP and gRPC) shows non-zero compute input, infer and output, per
        request and per batch size, as Triton's backends report them."""
        import tritonclient.grpc as grpcclient

        self.add_add_sub(model_repository, "add_sub", self.add_sub_config())
        running = despina_server(model_repository.root, ["--disable-auto-complete-config"])
        client = served(running)
        for seed in range(3):
            inputs = self.add_sub_request(2, seed)
            self.check_add_sub(client.infer("add_sub", inputs), inputs)
        stats = client.stats("add_sub")
        phases = ("compute_input", "compute_infer", "compute_output")
        for phase in phases:
            assert stats["inference_stats"][phase]["count"] == 3, phase
            assert int(stats["inference_stats"][phase]["ns"]) > 0, phase
        [batch] = stats["batch_stats"]
        assert batch["batch_size"] == 2
        for phase in phases:
            assert batch[phase]["count"] == 3 and int(batch[phase]["ns"]) > 0, phase
        with grpcclient.InferenceServerClient(running.grpc_url) as grpc:
            reply = grpc.get_inference_statistics("add_sub").model_stats[0]
        for phase in phases:
            assert getattr(reply.inference_stats, phase).count == 3, phase
            assert getattr(reply.inference_stats, phase).ns > 0, phase

    def test_requested_outputs_only(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        self.add_add_sub(model_repository, "add_sub", self.add_sub_config())
        client = served(despina_server(model_repository.root))
        inputs = self.add_sub_request(8)
        difference = self.add_sub_outputs[1]
        outputs = client.infer("add_sub", inputs, outputs=[difference])
        assert list(outputs) == [difference]
        a, b = (inputs[n] for n in self.add_sub_inputs)
        assert outputs[difference].tolist() == (a - b).tolist()

    def test_config_listing_a_subset_of_outputs(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        difference = self.add_sub_outputs[1]
        self.add_add_sub(model_repository, "only_sub", self.add_sub_config(outputs=[difference]))
        client = served(despina_server(model_repository.root))
        inputs = self.add_sub_request(1)
        outputs = client.infer("only_sub", inputs)
        assert list(outputs) == [difference]
        a, b = (inputs[n] for n in self.add_sub_inputs)
        assert outputs[difference].tolist() == (a - b).tolist()

    def test_autocomplete(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        self.require(AUTOCOMPLETE)
        model = self.autocomplete_model(self.scratch(model_repository))
        self.add_model(model_repository, "auto", model.config, model.files)
        client = served(despina_server(model_repository.root))
        config = client.config("auto")
        assert config["backend"] == self.backend
        if self.platforms and model.config is None:
            assert config["platform"] == self.platforms[0]
        assert config["max_batch_size"] == 4
        assert "dynamic_batching" in config
        assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
            (name, "TYPE_FP32", [4]) for name in model.inputs
        ]
        assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
            (name, "TYPE_FP32", [4]) for name in model.outputs
        ]
        inputs = dict(zip(model.inputs, self.add_sub_request(3).values(), strict=True))
        self.check_add_sub(client.infer("auto", inputs), inputs, model.inputs)

    def test_backend_config_default_max_batch_size(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        self.require(AUTOCOMPLETE, DEFAULT_MAX_BATCH_SIZE)
        model = self.autocomplete_model(self.scratch(model_repository))
        self.add_model(model_repository, "auto", model.config, model.files)
        flag = f"--backend-config={self.backend},default-max-batch-size=16"
        assert (
            served(despina_server(model_repository.root, [flag])).config("auto")["max_batch_size"]
            == 16
        )

    def test_version_folder_without_config_picks_the_backend(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        self.require(AUTOCOMPLETE, NO_CONFIG)
        self.add_add_sub(model_repository, "first", None)
        self.add_add_sub(model_repository, "third", None, version="3")
        client = served(despina_server(model_repository.root))
        index = client.index()
        assert index["first"]["version"] == "1" and index["third"]["version"] == "3"
        assert index["third"]["state"] == "READY"
        assert client.config("third")["backend"] == self.backend
        inputs = self.add_sub_request(2)
        self.check_add_sub(client.infer("third", inputs), inputs)

    def test_dynamic_batching_under_concurrency(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        extra = "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        self.add_add_sub(model_repository, "batched", self.add_sub_config(extra=extra))
        client = served(despina_server(model_repository.root))
        requests = [self.add_sub_request(1 + i % 3, seed=i) for i in range(24)]
        results = client.infer_many("batched", requests)
        for inputs, outputs in zip(requests, results, strict=True):
            self.check_add_sub(outputs, inputs)
        stats = client.stats("batched")
        first = self.add_sub_inputs[0]
        assert stats["inference_count"] == sum(r[first].shape[0] for r in requests)
        assert stats["execution_count"] < len(requests)

    def test_instance_group_count(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        extra = f"instance_group [ {{ count: 3 kind: {self.instance_kind} }} ]\n"
        self.add_add_sub(model_repository, "three", self.add_sub_config(extra=extra))
        client = served(despina_server(model_repository.root))
        version = client.server.models.get("three")
        assert [i.spec.name for i in version.instances] == ["three_0_0", "three_0_1", "three_0_2"]
        requests = [self.add_sub_request(2, seed=i) for i in range(12)]
        for inputs, outputs in zip(requests, client.infer_many("three", requests), strict=True):
            self.check_add_sub(outputs, inputs)

    @pytest.mark.parametrize("datatype", DATATYPES)
    def test_datatype_round_trip(
        self,
        model_repository: RepositoryBuilder,
        despina_server: Start,
        served: Any,
        datatype: str,
    ) -> None:
        import numpy as np

        self.require(datatype)
        model = self.identity_model(self.scratch(model_repository), datatype)
        self.add_model(model_repository, "identity", model.config, model.files)
        client = served(despina_server(model_repository.root))
        if model.config is None:  # auto-completed: the model file's datatype
            listed = client.config("identity")["input"][0]["data_type"]
            assert listed == ("TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}")
        shape = self.identity_shape(datatype)
        rng = np.random.default_rng(7)
        if datatype == "BYTES":
            words = [b"ab", b"", "h\u00e9llo".encode(), b"z" * 40, b"x", b"yy"]
            sent = np.array(words[: int(np.prod(shape))], dtype=object).reshape(shape)
        elif datatype == "BOOL":
            sent = rng.integers(0, 2, shape).astype(bool)
        else:
            sent = (rng.random(shape) * 100).astype(_numpy_dtype(datatype))
        got = client.infer("identity", {model.inputs[0]: sent})[model.outputs[0]]
        expected = self.identity_expected(datatype, sent)
        assert got.shape == expected.shape
        if datatype != "BYTES":
            assert got.dtype == expected.dtype
        assert got.tolist() == expected.tolist()

    # -- warm-up -----------------------------------------------------------------------

    def test_warmup_with_zero_and_random_data(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        a, b = self.add_sub_inputs
        extra = (
            f"instance_group [ {{ count: 2 kind: {self.instance_kind} }} ]\n"
            'model_warmup [ { name: "zeros" batch_size: 4\n'
            f'  inputs {{ key: "{a}" value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }}\n'
            f'  inputs {{ key: "{b}" value: {{ data_type: TYPE_FP32 dims: [ 4 ] random_data: true }} }}\n'
            "} ]\n"
        )
        self.add_add_sub(model_repository, "warm", self.add_sub_config(extra=extra))
        client = served(despina_server(model_repository.root))
        assert client.index()["warm"]["state"] == "READY"
        inputs = self.add_sub_request(1)
        self.check_add_sub(client.infer("warm", inputs), inputs)

    def test_warmup_runs_before_ready_and_a_failing_sample_fails_the_load(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        model = self.rejecting_model(self.scratch(model_repository))

        def warmup(sample: str, request: Mapping[str, Any]) -> tuple[str, dict[str, bytes]]:
            lines, files = [], {}
            for name, array in request.items():
                dims = ", ".join(str(d) for d in array.shape[1:])
                lines.append(
                    f'  inputs {{ key: "{name}" value: {{ data_type: TYPE_{_datatype(array)} '
                    f'dims: [ {dims} ] input_data_file: "{name}" }} }}\n'
                )
                files[f"warmup/{name}"] = array[0].tobytes()
            text = f'model_warmup [ {{ name: "{sample}" batch_size: 3\n{"".join(lines)}}} ]\n'
            return text, files

        group = f"instance_group [ {{ count: 2 kind: {self.instance_kind} }} ]\n"
        for name, sample, request in (
            ("warm", "ok", model.good),
            ("cold", "bad_sample", model.bad),
        ):
            text, data = warmup(sample, request)
            self.add_model(
                model_repository, name, model.config + group + text, model.files, "1", data
            )
        index = served(despina_server(model_repository.root, KEEP_GOING)).index()
        assert index["warm"]["state"] == "READY"
        assert index["cold"]["state"] == "UNAVAILABLE"
        reason = index["cold"]["reason"]
        assert f"warm-up 'bad_sample' failed: {model.errors[0]}" in reason, reason
        for text in model.errors:
            assert text in reason

    # -- errors ------------------------------------------------------------------------

    def test_missing_model_file_fails_that_model_only(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        model_repository.add("empty", self.add_sub_config(), {"1/README": "no model here"})
        self.add_add_sub(model_repository, "good", self.add_sub_config())
        client = served(despina_server(model_repository.root, KEEP_GOING))
        index = client.index()
        assert index["empty"]["state"] == "UNAVAILABLE"
        assert self.missing_file_reason("empty") in index["empty"]["reason"]
        assert index["good"]["state"] == "READY"
        inputs = self.add_sub_request(1)
        self.check_add_sub(client.infer("good", inputs), inputs)

    def test_corrupt_model_file_fails_that_model_only(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        cases = self.corrupt_models(self.scratch(model_repository))
        assert cases, "corrupt_models gave no case"
        for case, files in cases.items():
            self.add_model(model_repository, f"corrupt_{case}", self.add_sub_config(), files)
        self.add_add_sub(model_repository, "good", self.add_sub_config())
        client = served(despina_server(model_repository.root, KEEP_GOING))
        index = client.index()
        for case in cases:
            row = index[f"corrupt_{case}"]
            assert row["state"] == "UNAVAILABLE", case
            assert self.corrupt_reason(f"corrupt_{case}", case) in row["reason"], case
        assert index["good"]["state"] == "READY"
        inputs = self.add_sub_request(1)
        self.check_add_sub(client.infer("good", inputs), inputs)

    @pytest.mark.parametrize("case", MISMATCHES)
    def test_config_disagreeing_with_the_model_fails_that_model_only(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any, case: str
    ) -> None:
        self.require(CONFIG_CHECK)
        (first, second), total = self.add_sub_inputs, self.add_sub_outputs[0]

        def tensor(name: str, data_type: str = "TYPE_FP32", dims: str = "4") -> str:
            return f'{{ name: "{name}" data_type: {data_type} dims: [ {dims} ] }}'

        changed = {
            "dims": (tensor(first), tensor(first, dims="5")),
            "rank": (tensor(first), tensor(first, dims="2, 2")),
            "data_type": (tensor(first), tensor(first, "TYPE_FP64")),
            "unknown_input": (tensor(first), tensor("IMAGE")),
            "missing_input": (f"{tensor(first)}, {tensor(second)}", tensor(first)),
            "unknown_output": (tensor(total), tensor("SCORES")),
        }[case]
        text = self.add_sub_config()
        assert changed[0] in text
        self.add_add_sub(model_repository, "broken", text.replace(*changed, 1))
        self.add_add_sub(model_repository, "good", self.add_sub_config())
        client = served(despina_server(model_repository.root, KEEP_GOING))
        index = client.index()
        assert index["broken"]["state"] == "UNAVAILABLE"
        for fragment in self.mismatch_reasons("broken", case):
            assert fragment in index["broken"]["reason"]
        assert index["good"]["state"] == "READY"
        inputs = self.add_sub_request(1)
        self.check_add_sub(client.infer("good", inputs), inputs)

    def test_wrong_datatype_or_shape_is_invalid_argument(
        self,
        model_repository: RepositoryBuilder,
        despina_server: Start,
        http_client: Any,
        grpc_client: Any,
    ) -> None:
        import numpy as np
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        self.add_add_sub(model_repository, "add_sub", self.add_sub_config())
        running = despina_server(model_repository.root)
        a, b = self.add_sub_inputs
        ones = np.ones((1, 4), np.float32)
        cases: dict[str, dict[str, Any]] = {
            "datatype": {a: ones.astype(np.float64), b: ones},
            "shape": {a: np.ones((1, 5), np.float32), b: ones},
        }
        for protocol, module, client, status in (
            ("http", httpclient, http_client(running), "400"),
            ("grpc", grpcclient, grpc_client(running), "StatusCode.INVALID_ARGUMENT"),
        ):
            for case, request in cases.items():
                items = []
                for name, array in request.items():
                    item = module.InferInput(name, list(array.shape), _datatype(array))
                    item.set_data_from_numpy(array)
                    items.append(item)
                with pytest.raises(InferenceServerException) as raised:
                    client.infer("add_sub", items)
                assert raised.value.status() == status, (protocol, case)
                assert a in raised.value.message(), (protocol, case)
            assert client.is_model_ready("add_sub")
            items = []
            for name in (a, b):
                item = module.InferInput(name, [1, 4], "FP32")
                item.set_data_from_numpy(ones)
                items.append(item)
            result = client.infer("add_sub", items)
            assert result.as_numpy(self.add_sub_outputs[0]).tolist() == [[2.0] * 4]

    def test_runtime_rejection_fails_only_that_request(
        self, model_repository: RepositoryBuilder, despina_server: Start, served: Any
    ) -> None:
        from tritonclient.utils import InferenceServerException

        model = self.rejecting_model(self.scratch(model_repository))
        text = model.config + "dynamic_batching { max_queue_delay_microseconds: 50000 }\n"
        self.add_model(model_repository, "picky", text, model.files)
        client = served(despina_server(model_repository.root, KEEP_GOING))
        good, bad = dict(model.good), dict(model.bad)
        with pytest.raises(InferenceServerException) as raised:
            client.infer("picky", bad)
        assert raised.value.status() in ("400", "500")
        for text in model.errors:
            assert text in str(raised.value)
        results = client.infer_many("picky", [good, good, bad, good, bad, good])
        for position, result in enumerate(results):
            if position in (2, 4):
                assert isinstance(result, InferenceServerException), position
                for text in model.errors:
                    assert text in str(result)
            else:
                assert not isinstance(result, Exception), result
                for name, value in model.expected.items():
                    assert result[name].tolist() == value.tolist()
        stats = client.stats("picky")
        assert stats["inference_stats"]["success"]["count"] == 4
        assert stats["inference_stats"]["fail"]["count"] == 3
        assert client.client.is_model_ready("picky")


def _numpy_dtype(datatype: str) -> Any:
    """The numpy dtype of a Triton datatype (BF16 through ml_dtypes)."""
    from despina.inference.tensors import dtype_of

    return dtype_of(datatype)


def _datatype(array: Any) -> str:
    """The Triton datatype of a numpy array."""
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))
