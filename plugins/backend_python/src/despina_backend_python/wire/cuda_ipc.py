"""GPU tensors across the process boundary, by CUDA IPC (process mode, both directions).

The sender copies each device tensor into a fresh ``cudaMalloc`` allocation of its own
(an IPC handle names a whole allocation, and the tensor may sit inside a larger one or
in cupy's memory pool), waits for the copy, and sends the allocation's
``ipcGetMemHandle`` handle with the device id, datatype and shape in the message. It
keeps those allocations under the message's ``ipc`` key. The receiver, while it reads
the message, opens each handle, copies device-to-device into an allocation of its own,
waits for the copy, closes the handle, and then answers ``{"op": "ipc_done", "key": k}``;
only that frees the sender's allocations (so the receiver's tensors live as long as it
likes, and the sender never frees what is still being read). When the peer process
dies, its sender's allocations die with it, and the server frees the ones it kept for
the peer (:meth:`DeviceExports.release_all`). Server-independent; cupy is imported only
when a device tensor crosses.
"""

from __future__ import annotations

import itertools
from typing import Any

from despina_backend_python.pb import device
from despina_backend_python.pb.types import wire_datatype, wire_dtype

#: (position in the message's tensors, name, datatype, shape, device id, IPC handle or
#: None for an empty tensor)
DeviceDescriptor = tuple[int, str, str, tuple[int, ...], int, bytes | None]
#: The operation that tells the sender its allocations of message ``key`` were copied.
DONE_OP = "ipc_done"


def _pointer(array: Any) -> int:
    """The device address of a cupy array or a DeviceArray."""
    return int(array.__cuda_array_interface__["data"][0])


class DeviceExports:
    """The sending side of one channel direction: device allocations kept until the
    receiver has copied them (see the module docstring)."""

    def __init__(self) -> None:
        self._keys = itertools.count(1)
        #: message key -> (device id, pointer) of each allocation it exported
        self._kept: dict[int, list[tuple[int, int]]] = {}

    def export(self, tensors: list[tuple[int, str, Any]]) -> dict[str, Any]:
        """The message fields ``cuda`` (descriptors) and ``ipc`` (the key) for
        ``tensors``: (position, name, C-contiguous device array) each."""
        cp = device.cupy()
        runtime = cp.cuda.runtime
        allocations: list[tuple[int, int]] = []
        descriptors: list[DeviceDescriptor] = []
        try:
            for position, name, array in tensors:
                device_id = int(array.__dlpack_device__()[1])
                shape = array.shape  # a tuple of ints already
                handle = None
                if array.nbytes:
                    with cp.cuda.Device(device_id) as gpu:
                        pointer = runtime.malloc(array.nbytes)
                        allocations.append((device_id, pointer))
                        kind = runtime.memcpyDeviceToDevice
                        runtime.memcpy(pointer, _pointer(array), array.nbytes, kind)
                        gpu.synchronize()
                        handle = bytes(runtime.ipcGetMemHandle(pointer))
                datatype = wire_datatype(array)
                descriptors.append((position, name, datatype, shape, device_id, handle))
        except BaseException:
            _free(allocations)
            raise
        key = next(self._keys)
        self._kept[key] = allocations
        return {"cuda": descriptors, "ipc": key}

    def release(self, key: int) -> None:
        """Free the allocations of message ``key`` (its receiver copied them)."""
        _free(self._kept.pop(key, []))

    def release_all(self) -> None:
        """Free every allocation still kept (the receiver is gone)."""
        for key in list(self._kept):
            self.release(key)

    def __len__(self) -> int:
        """How many messages' allocations are kept."""
        return len(self._kept)


def _free(allocations: list[tuple[int, int]]) -> None:
    if not allocations:
        return
    cp = device.cupy()
    for device_id, pointer in allocations:
        with cp.cuda.Device(device_id):
            cp.cuda.runtime.free(pointer)


def import_tensors(descriptors: list[DeviceDescriptor]) -> list[tuple[int, str, Any]]:
    """(position, name, cupy array) of each descriptor: a copy, in this process's own
    memory, of the sender's allocation (opened, copied, waited for, closed)."""
    cp = device.cupy()
    runtime = cp.cuda.runtime
    out = []
    for position, name, datatype, shape, device_id, handle in descriptors:
        with cp.cuda.Device(device_id) as gpu:
            array = cp.empty(tuple(shape), wire_dtype(datatype))
            if handle is not None:
                pointer = runtime.ipcOpenMemHandle(handle)
                try:
                    kind = runtime.memcpyDeviceToDevice
                    runtime.memcpy(array.data.ptr, pointer, array.nbytes, kind)
                    gpu.synchronize()
                finally:
                    runtime.ipcCloseMemHandle(pointer)
        out.append((position, name, array))
    return out


def done_message(fields: dict[str, Any]) -> dict[str, Any] | None:
    """The ``ipc_done`` answer a message read needs (None: it carried no device tensor)."""
    key = fields.get("ipc")
    return None if key is None else {"op": DONE_OP, "key": key}
