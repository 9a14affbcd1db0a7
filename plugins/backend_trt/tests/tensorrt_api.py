"""Reads the documented Python API out of a TensorRT bindings wheel's ``tensorrt.so``
without loading it (libnvinfer need not exist): pybind11 keeps each docstring as a
``tensorrt::<Class>Doc::<method>`` string whose ``:arg name:`` lines give the parameters,
and every method and class name as a plain string. Uses binutils' ``readelf``.

``python tensorrt_api.py <tensorrt.so> <version>`` prints the record of the names the
backend uses (tests/data/tensorrt_api.json holds the records of the published wheels).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

#: Every TensorRT name the backend (and the stand-in) uses: "Class.method" or a
#: module-level name; the parameters (self left out) as the backend calls them.
USED: dict[str, list[str] | None] = {
    "Runtime": None,
    "ILogger": None,
    "IOutputAllocator": None,
    "TensorIOMode": None,
    "TensorFormat": None,
    "ExecutionContextAllocationStrategy": None,
    "DataType": None,
    "Runtime.deserialize_cuda_engine": ["serialized_engine"],
    "Runtime.engine_host_code_allowed": None,
    "ICudaEngine.num_io_tensors": None,
    "ICudaEngine.num_optimization_profiles": None,
    "ICudaEngine.get_tensor_name": ["index"],
    "ICudaEngine.get_tensor_mode": ["name"],
    "ICudaEngine.get_tensor_dtype": ["name"],
    "ICudaEngine.get_tensor_shape": ["name"],
    "ICudaEngine.is_shape_inference_io": ["name"],
    "ICudaEngine.get_tensor_format": ["name"],
    "ICudaEngine.get_tensor_profile_shape": ["name", "profile_index"],
    "ICudaEngine.get_tensor_profile_values": ["name", "profile_index"],
    "ICudaEngine.create_execution_context": None,
    "IExecutionContext.set_optimization_profile_async": ["profile_index", "stream_handle"],
    "IExecutionContext.set_input_shape": ["name", "shape"],
    "IExecutionContext.get_tensor_shape": ["name"],
    "IExecutionContext.set_tensor_address": ["name", "memory"],
    "IExecutionContext.set_output_allocator": ["name", "output_allocator"],
    "IExecutionContext.execute_async_v3": ["stream_handle"],
    "IOutputAllocator.reallocate_output": None,
    "IOutputAllocator.reallocate_output_async": None,
    "IOutputAllocator.notify_shape": None,
    "ILogger.log": None,
}


def _readelf(so: Path, flag: str) -> str:
    return subprocess.run(
        ["readelf", flag, str(so)], capture_output=True, text=True, check=True
    ).stdout


def docstrings(so: Path) -> dict[str, str]:
    """``Class.method`` -> docstring, for the methods with a Doc constant."""
    addend = {}
    for line in _readelf(so, "-rW").splitlines():
        parts = line.split()
        if len(parts) >= 4 and "RELATIVE" in parts[2]:
            addend[int(parts[0], 16)] = int(parts[3], 16)
    sections = [
        (int(m[1], 16), int(m[2], 16), int(m[3], 16))
        for m in re.finditer(
            r"\]\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", _readelf(so, "-SW")
        )
    ]
    data = so.read_bytes()
    docs = {}
    for line in _readelf(so, "-sW").splitlines():
        parts = line.split()
        match = (
            re.match(r"_ZN8tensorrt\d+(\w+?)DocL?\d+(\w+?)E(\.|$)", parts[7])
            if len(parts) > 7
            else None
        )
        if not match or int(parts[1], 16) not in addend:
            continue
        target = addend[int(parts[1], 16)]
        for start, offset, size in sections:
            if start <= target < start + size:
                at = target - start + offset
                docs[f"{match[1]}.{match[2]}"] = data[at : data.index(b"\0", at)].decode(
                    errors="replace"
                )
    return docs


def record(so: Path) -> dict[str, dict[str, object]]:
    """For each used name: whether the library holds it, and its documented parameters."""
    docs = docstrings(so)
    strings = set(re.findall(rb"[A-Za-z_][A-Za-z0-9_]+", so.read_bytes()))
    out: dict[str, dict[str, object]] = {}
    for name in USED:
        doc = docs.get(name)
        out[name] = {
            "present": name.rpartition(".")[2].encode() in strings,
            "params": re.findall(r":arg (\w+):", doc) if doc else None,
        }
    return out


if __name__ == "__main__":
    print(json.dumps({sys.argv[2]: record(Path(sys.argv[1]))}, indent=1, sort_keys=True))
