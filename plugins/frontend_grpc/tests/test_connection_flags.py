"""tritonserver's connection flags on the wire: keepalive PINGs and their timeout, maximum
connection age and its grace, and ``--reuse-grpc-port``, each seen by a raw HTTP/2 client
(:class:`test_http2_abuse.RawClient`) or a second server."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.testing import RunningServer
from despina_frontend_grpc import h2_frames
from test_http2_abuse import RawClient, assert_serves, grpc_message
from tritonclient.grpc import service_pb2 as pb

Serve = Callable[..., RunningServer]
UNAVAILABLE = 14


def server_pings(client: RawClient) -> list[bytes]:
    """The payloads of the PINGs the server sent (not its acknowledgements)."""
    return [
        p for k, flags, _, p in client.frames if k == h2_frames.PING and not flags & h2_frames.ACK
    ]


def test_keepalive_pings_and_closes_without_an_ack(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """With ``--grpc-keepalive-permit-without-calls`` an idle connection is PINGed every
    ``--grpc-keepalive-time``; a PING left unacknowledged for ``--grpc-keepalive-timeout``
    closes the connection."""
    running = serve(
        "--grpc-keepalive-time=100",
        "--grpc-keepalive-timeout=100",
        "--grpc-keepalive-permit-without-calls=true",
    )
    client = connect(running)
    client.read_until(lambda: bool(server_pings(client)))
    client.read_to_close()
    assert client.goaway() is None
    assert_serves(running)


def test_max_connection_age_drains_the_connection(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """Past ``--grpc-max-connection-age`` the connection gets a GOAWAY (NO_ERROR), then
    the server closes it."""
    running = serve("--grpc-max-connection-age=100")
    client = connect(running)
    client.read_until(lambda: client.goaway() is not None)
    assert client.goaway() == h2_frames.NO_ERROR
    client.read_to_close()
    assert_serves(running)


def test_max_connection_age_grace_ends_running_calls(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """A call still running ``--grpc-max-connection-age-grace`` after the age ends with
    UNAVAILABLE and the connection closes."""
    running = serve("--grpc-max-connection-age=200", "--grpc-max-connection-age-grace=100")
    client = connect(running)
    request = pb.ModelInferRequest(model_name="sleep")
    request.inputs.add(name="IN", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.array([50.0], np.float32).tobytes())  # 5 s
    sid = client.new_stream()
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block()),
        h2_frames.frame(
            h2_frames.DATA, h2_frames.END_STREAM, sid, grpc_message(request.SerializeToString())
        ),
    )
    client.read_until(lambda: "grpc-status" in client.headers(sid))
    assert client.goaway() == h2_frames.NO_ERROR
    assert client.headers(sid)["grpc-status"] == str(UNAVAILABLE)
    client.read_to_close()
    assert_serves(running)


def test_reuse_grpc_port_lets_two_servers_share_it(serve: Serve) -> None:
    first = serve("--reuse-grpc-port=true")
    second = serve(f"--grpc-port={first.grpc_port}", "--reuse-grpc-port=true")
    assert second.grpc_port == first.grpc_port
    assert_serves(second)


def test_response_delay_hook_holds_back_non_inference_answers(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's test hook ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC``: an answer to any
    RPC but inference waits that long (a client deadline shorter than it expires), while
    inference answers at once."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    monkeypatch.setenv("TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC", "60")
    running = serve()
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="Deadline"):
            client.is_server_live(client_timeout=0.5)
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        other = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
        other.set_data_from_numpy(np.ones((1, 16), np.float32))
        result = client.infer("add_sub", [tensor, other], client_timeout=30)
        assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
